"""Comparison 4: steps fed from TFRecord files through the kdist builder vs from memory.

The same arrays are written with `kdist.data.tfrecords.write_tfrecords` (float
lists, 4 training shards) and read by `data=tfrecord`; the reference is the in-memory
synthetic source (cached tensors). With `data.cache=false` every epoch reads and parses
the files again (the case the target is about): whole files (the default for these
files) and, as a second side, record by record (`data.source.whole_file_max_mb=0`, the
reader of files without a record length and checksum in their manifest).
`data.cache=true` (the default) reads them once and then serves the cached tensors. The
in-memory source with `data.cache=false` (a fresh tensor per example on every pass, no
reading) is measured in the same rounds: the floor for any uncached source. So is the
same source handed out in 4 per-file blocks on every pass (`benchmarks.blocks`: the
shape of the whole-file reader's pipeline, with nothing read, checked or parsed): the
floor for a reader that produces per-file blocks. Two more sides hand out the same
blocks while each block reads its TFRecord file's bytes on every pass, and then also
checksums them as the whole-file reader does: the floors of any reader that reads the
files every pass, and of one that also checks them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.context import Context
from benchmarks.harness import Case, Comparison, Target, interleave, load_average, summarize
from benchmarks.jobs import Job, KdistJob, kdist_overrides, kdist_pipeline, synthetic_data

__all__ = ["GROUP", "run"]

GROUP = "4. input pipeline: TFRecord files vs in-memory tensors"

MEMORY, FILES, FILES_CACHED = "in-memory", "tfrecord, cache=false", "tfrecord, cache=true"
MEMORY_UNCACHED = "in-memory, cache=false"
FILES_RECORDS = "tfrecord, cache=false, record by record"
BLOCKS = "in-memory in per-file blocks, cache=false"
BLOCKS_READ = "in-memory in per-file blocks, each file's bytes read every pass"
BLOCKS_CHECKED = "in-memory in per-file blocks, each file's bytes read and checksummed every pass"


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
    _Spec("mlp_k32", "MLP 784-128-10, batch 32, 32 steps/call", "mlp", 32, 32, 2, 160, 9, False),
    _Spec("cnn_k1", "MNIST CNN, batch 128, 1 step/call", "cnn", 128, 1, 1, 4, 7, True),
]


def _write_files(ctx: Context, job: Job) -> str:
    from kdist.data.tfrecords import write_tfrecords

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
        MEMORY_UNCACHED: KdistJob(
            kdist_overrides(job, "data.cache=false"),
            ctx.workdir / f"input_{spec.key}_memory_uncached",
        ),
        FILES_RECORDS: KdistJob(
            kdist_overrides(
                job, data=[*files, "data.cache=false", "data.source.whole_file_max_mb=0"]
            ),
            ctx.workdir / f"input_{spec.key}_files_records",
        ),
        BLOCKS: KdistJob(
            kdist_overrides(
                job, "data.cache=false", "data.source._target_=benchmarks.blocks.file_blocks"
            ),
            ctx.workdir / f"input_{spec.key}_blocks",
        ),
        BLOCKS_READ: KdistJob(
            kdist_overrides(job, *_blocks_reading(path)), ctx.workdir / f"input_{spec.key}_read"
        ),
        BLOCKS_CHECKED: KdistJob(
            kdist_overrides(job, *_blocks_reading(path), "+data.source.checksum=true"),
            ctx.workdir / f"input_{spec.key}_checked",
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
    cpu: dict[str, list[float]] = {}
    samples = interleave(cases, rounds, warmup=0 if spec.trace_warmup else 1, cpu=cpu)
    load = {"before": before, "after": load_average()}
    details = {
        "model": spec.model,
        "global_batch_size": spec.batch,
        "steps_per_call": spec.steps_per_call,
        "steps_per_round": job.steps,
        "files": "4 TFRecord shards of float lists, integrity=strict (manifest checks); "
        "read whole unless the side says record by record",
    }
    common = {
        "group": GROUP,
        "samples": samples,
        "cpu": cpu,
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
        summarize(
            id=f"input/{spec.key}_files_records",
            title=f"{spec.title}: TFRecord (cache=false) read record by record "
            "(whole_file_max_mb=0) / in-memory",
            a=FILES_RECORDS,
            **common,
        ),
        summarize(
            id=f"input/{spec.key}_blocks",
            title=f"{spec.title}: in-memory (cache=false) in 4 per-file blocks a pass, nothing "
            "read (the floor of a reader of per-file blocks) / in-memory",
            a=BLOCKS,
            **common,
        ),
        summarize(
            id=f"input/{spec.key}_blocks_read",
            title=f"{spec.title}: in-memory in 4 per-file blocks a pass, each block reading its "
            "TFRecord file's bytes every pass (the floor of a reader that reads the files "
            "every pass) / in-memory",
            a=BLOCKS_READ,
            **common,
        ),
        summarize(
            id=f"input/{spec.key}_blocks_checked",
            title=f"{spec.title}: the same, each file's bytes also checksummed (farmhash64, "
            "as the whole-file reader checks them) / in-memory",
            a=BLOCKS_CHECKED,
            **common,
        ),
        summarize(
            id=f"input/{spec.key}_memory_uncached",
            title=f"{spec.title}: in-memory (cache=false) / in-memory (the floor of an "
            "uncached source)",
            a=MEMORY_UNCACHED,
            **common,
        ),
    ]


def _blocks_reading(path: str) -> list[str]:
    """Overrides for `benchmarks.blocks.file_blocks` reading the files of `path` every pass."""
    return [
        "data.cache=false",
        "data.source._target_=benchmarks.blocks.file_blocks",
        f"+data.source.read_path={path}",
    ]


def _pipeline_only(ctx: Context) -> list[Comparison]:
    """Examples per second of the input pipelines alone (no training): what limits comparison
    4. kdist's builder on the in-memory source, on the TFRecord source with its checks
    (`integrity=strict`: files read whole, and record by record) and without (`off`),
    and a hand-written TFRecord pipeline that batches before parsing
    (`tf.io.parse_example` on a whole batch)."""
    import tensorflow as tf

    job = Job(
        model="mlp", global_batch_size=32, steps_per_execution=32, epochs=1, steps_per_epoch=1
    )
    path = _write_files(ctx, job)
    batches = ctx.scale(200, 20)

    def kdist_dataset(data: list[str]) -> tf.data.Dataset:
        return kdist_pipeline(job, data, batch=32)[1]

    files = ["data=tfrecord", f"data.source.path={path}", "data.cache=false"]
    schema = {
        "x": tf.io.FixedLenFeature(job.input_shape, tf.float32),
        "y": tf.io.FixedLenFeature([], tf.int64),
    }
    shards = sorted(str(p) for p in (ctx.workdir / "tfrecord_mlp").glob("train-*.tfrecord"))
    plain = (
        tf.data.TFRecordDataset(shards)
        .shuffle(4096, seed=42)
        .repeat()
        .batch(32, drop_remainder=True)
        .map(lambda r: tf.io.parse_example(r, schema), num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
    datasets = {
        MEMORY: kdist_dataset(synthetic_data(job)),
        "tfrecord, integrity=strict": kdist_dataset([*files, "data.source.integrity=strict"]),
        "tfrecord, integrity=strict, record by record": kdist_dataset(
            [*files, "data.source.integrity=strict", "data.source.whole_file_max_mb=0"]
        ),
        "tfrecord, integrity=off": kdist_dataset([*files, "data.source.integrity=off"]),
        "plain TF: batch, then parse_example": plain,
    }
    iterators = {name: iter(ds) for name, ds in datasets.items()}

    def rate(iterator: object) -> Callable[[], float]:
        def run() -> float:
            started = time.perf_counter()
            for _ in range(batches):
                next(iterator)  # type: ignore[call-overload]
            return batches * 32 / (time.perf_counter() - started)

        return run

    rounds = ctx.rounds_for(7)
    ctx.log(f"input/pipeline-only: {', '.join(datasets)}; {rounds} rounds of {batches} batches")
    before = load_average()
    samples = interleave([Case(n, rate(it)) for n, it in iterators.items()], rounds)
    load = {"before": before, "after": load_average()}
    details = {"batches_per_round": batches, "global_batch_size": 32, "features": "784 floats"}
    return [
        summarize(
            id=f"input/pipeline_{name.split(':')[0].replace(', ', '_').replace(' ', '_')}",
            group=GROUP,
            title=f"input pipeline alone, MLP data (784 floats), batch 32: {name} / in-memory",
            samples=samples,
            a=name,
            b=MEMORY,
            unit="examples/s",
            lower_is_better=False,
            load=load,
            details=details,
        )
        for name in datasets
        if name != MEMORY
    ]


def _stages(ctx: Context) -> list[Comparison]:
    """The MLP job's input pipelines alone, in CPU time per pass (`benchmarks.input_stages`)."""
    from benchmarks import input_stages

    job = Job(
        model="mlp", global_batch_size=32, steps_per_execution=32, epochs=1, steps_per_epoch=1
    )
    return input_stages.run(ctx, _write_files(ctx, job), job, GROUP)


def run(ctx: Context) -> list[Comparison]:
    """Comparison 4, and the input pipelines alone."""
    results: list[Comparison] = []
    for spec in SPECS:
        if ctx.quick and spec.model != "mlp":
            continue
        results += _compare(ctx, spec)
    results += _pipeline_only(ctx)
    results += _stages(ctx)
    return results
