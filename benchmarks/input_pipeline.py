"""Comparison 4: steps fed from TFRecord files through the kdist builder vs from memory.

The same arrays are written with `kdist.data.tfrecord_io.write_tfrecords` (float
lists, 4 training shards) and read by `data=tfrecord`; the reference is the in-memory
synthetic source (cached tensors). With `data.cache=false` every epoch reads and parses
the files again (the case the target is about); `data.cache=true` (the default) reads
them once and then serves the cached tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.context import Context
from benchmarks.harness import Case, Comparison, Target, interleave, load_average, summarize
from benchmarks.jobs import Job, KdistJob, kdist_overrides

__all__ = ["GROUP", "run"]

GROUP = "4. input pipeline: TFRecord files vs in-memory tensors"

MEMORY, FILES, FILES_CACHED = "in-memory", "tfrecord, cache=false", "tfrecord, cache=true"


@dataclass(frozen=True)
class _Spec:
    key: str
    title: str
    model: str
    batch: int
    steps_per_call: int
    epochs: int
    steps_per_epoch: int
    rounds: int
    trace_warmup: bool


SPECS = [
    # The most input-bound job: a 1 ms step of 32 examples.
    _Spec("mlp_k32", "MLP 784-128-10, batch 32, 32 steps/call", "mlp", 32, 32, 2, 256, 9, False),
    _Spec("cnn_k1", "MNIST CNN, batch 128, 1 step/call", "cnn", 128, 1, 1, 4, 7, True),
]


def _write_files(ctx: Context, job: Job) -> str:
    from kdist.data.tfrecord_io import write_tfrecords

    folder = ctx.workdir / f"tfrecord_{job.model}"
    if not (folder / "manifest.json").exists():
        write_tfrecords(folder, {"train": job.arrays()}, num_shards=4, num_classes=10)
    return str(folder)


def _compare(ctx: Context, spec: _Spec) -> list[Comparison]:
    job = Job(
        model=spec.model,
        global_batch_size=spec.batch,
        steps_per_execution=spec.steps_per_call,
        epochs=ctx.scale(spec.epochs, 1),
        steps_per_epoch=ctx.scale(spec.steps_per_epoch, max(spec.steps_per_call, 8)),
    )
    path = _write_files(ctx, job)
    files = ["data=tfrecord", f"data.source.path={path}"]
    sides = {
        MEMORY: KdistJob(kdist_overrides(job), ctx.workdir / f"input_{spec.key}_memory"),
        FILES: KdistJob(
            kdist_overrides(job, data=[*files, "data.cache=false"]),
            ctx.workdir / f"input_{spec.key}_files",
        ),
        FILES_CACHED: KdistJob(
            kdist_overrides(job, data=[*files, "data.cache=true"]),
            ctx.workdir / f"input_{spec.key}_cached",
        ),
    }
    rounds = ctx.rounds_for(spec.rounds)
    ctx.log(f"input/{spec.key}: {', '.join(sides)}; {rounds} rounds of {job.steps} steps")
    cases = [
        Case(
            name,
            (lambda side=side: side.fit() / job.steps),
            setup=side.trace if spec.trace_warmup else None,
        )
        for name, side in sides.items()
    ]
    before = load_average()
    samples = interleave(cases, rounds, warmup=0 if spec.trace_warmup else 1)
    load = {"before": before, "after": load_average()}
    details = {
        "model": spec.model,
        "global_batch_size": spec.batch,
        "steps_per_call": spec.steps_per_call,
        "steps_per_round": job.steps,
        "files": "4 TFRecord shards of float lists, integrity=strict (manifest checks)",
    }
    common = {
        "group": GROUP,
        "samples": samples,
        "b": MEMORY,
        "unit": "ms/step",
        "scale": 1000.0,
        "load": load,
        "details": details,
    }
    return [
        summarize(
            id=f"input/{spec.key}_files",
            title=f"{spec.title}: TFRecord (cache=false) / in-memory",
            a=FILES,
            target=Target("<=", 1.05),
            **common,
        ),
        summarize(
            id=f"input/{spec.key}_cached",
            title=f"{spec.title}: TFRecord (cache=true, the default) / in-memory",
            a=FILES_CACHED,
            target=Target("<=", 1.05),
            **common,
        ),
    ]


def run(ctx: Context) -> list[Comparison]:
    """Comparison 4."""
    results: list[Comparison] = []
    for spec in SPECS:
        if ctx.quick and spec.model != "mlp":
            continue
        results += _compare(ctx, spec)
    return results
