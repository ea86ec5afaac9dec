"""Comparisons 5b and 5c: local clusters (`kdist.launch`) against one process.

One round runs the same job three times, in an order that alternates between rounds:
`python -m kdist.train` on one device (one process), `kdist.launch --workers 2` with
`strategy=multi_worker_mirrored`, and `kdist.launch --workers 1 --ps 1` with
`strategy=parameter_server` and `strategy.steps_per_schedule=16`. Throughput is the
examples per second of the second epoch (the first traces and connects), timed by
a probe callback on the chief (`benchmarks.probes.EpochTimer`).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from typing import Any

from benchmarks.context import Context
from benchmarks.harness import Case, Comparison, Target, interleave, load_average, summarize
from benchmarks.processes import Finished, launch_cluster, run_command

__all__ = ["GROUP", "JOB", "run", "run_against_loops"]

GROUP = "5. strategies on this machine"

ONE, MWMS, PS = "1 process (one_device)", "2 local workers (MWMS)", "PS: 1 worker + 1 ps"
# `KDIST_BENCH_BATCH` and `KDIST_BENCH_STEPS` (steps an epoch) change the job for every
# side, TensorFlow's loops included (their tasks inherit the environment): the 16-core
# machine measures at global batch 256 (issue 29, `../shared/DEVICE.md`).
STEPS_PER_CALL = 16
STEPS_PER_EPOCH = int(os.environ.get("KDIST_BENCH_STEPS", "16"))
EPOCHS = 2
BATCH = int(os.environ.get("KDIST_BENCH_BATCH", "128"))

# The MNIST CNN on synthetic 28x28x1 data: compute-bound enough that a step is not all
# communication, the kind of job one would spread over workers.
JOB = [
    "model=cnn",
    "data=synthetic",
    "data.source.num_train=4096",
    "data.source.num_validation=0",
    "trainer.validation=false",
    "objective.name=loss",
    "objective.direction=min",
    f"trainer.global_batch_size={BATCH}",
    f"trainer.steps_per_execution={STEPS_PER_CALL}",
    f"trainer.steps_per_epoch={STEPS_PER_EPOCH}",
    f"trainer.epochs={EPOCHS}",
    "trainer.verbose=0",
    "callbacks=minimal",
    "callbacks.extra=[{_target_:benchmarks.probes.EpochTimer,"
    f"steps_per_epoch:{STEPS_PER_EPOCH},global_batch_size:{BATCH}}}]",
]


def _throughput(done: Finished, what: str) -> tuple[float, dict[str, Any]]:
    done.check(what)
    epochs = [fields for kind, fields in done.lines if kind == "epoch"]
    if len(epochs) < 2:
        raise RuntimeError(f"{what}: expected {EPOCHS} epoch lines, got {len(epochs)}")
    timed = epochs[1:]
    examples = sum(int(e["steps"]) * int(e["batch"]) for e in timed)
    seconds = sum(float(e["seconds"]) for e in timed)
    first = float(epochs[0]["seconds"])
    return examples / seconds, {"first_epoch_seconds": first, "command_seconds": done.seconds}


class _Runs:
    """The three ways of running the job; each call is one round of one side."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.count = 0
        self.extra: dict[str, list[dict[str, Any]]] = {ONE: [], MWMS: [], PS: []}

    def _dir(self, tag: str) -> Any:
        self.count += 1
        return self.ctx.workdir / f"cluster_{self.count:02d}_{tag}"

    def one(self) -> float:
        run_dir = self._dir("one")
        done = run_command(
            ["-m", "kdist.train", *JOB, "strategy=one_device", f"hydra.run.dir={run_dir}"],
            cwd=self.ctx.workdir,
        )
        value, extra = _throughput(done, "python -m kdist.train")
        self.extra[ONE].append(extra)
        return value

    def multi_worker(self) -> float:
        done = launch_cluster(
            workers=2,
            ps=0,
            overrides=[*JOB, "strategy=multi_worker_mirrored"],
            run_dir=self._dir("mwms"),
            prefix="[worker 0]",
        )
        value, extra = _throughput(done, "kdist.launch --workers 2")
        self.extra[MWMS].append(extra)
        return value

    def parameter_server(self) -> float:
        done = launch_cluster(
            workers=1,
            ps=1,
            overrides=[*JOB, "strategy=parameter_server", "strategy.steps_per_schedule=16"],
            run_dir=self._dir("ps"),
            prefix="[chief 0]",
        )
        value, extra = _throughput(done, "kdist.launch --workers 1 --ps 1")
        self.extra[PS].append(extra)
        return value

    def hand_multi_worker(self) -> float:
        done = launch_cluster(
            workers=2,
            ps=0,
            overrides=[],
            run_dir=self._dir("hand_mwms"),
            prefix="[worker 0]",
            module="benchmarks.mwms_loop",
        )
        return _throughput(done, "benchmarks.mwms_loop on 2 workers")[0]

    def hand_parameter_server(self) -> float:
        done = launch_cluster(
            workers=1,
            ps=1,
            overrides=[],
            run_dir=self._dir("hand_ps"),
            prefix="[chief 0]",
            module="benchmarks.ps_loop",
        )
        return _throughput(done, "benchmarks.ps_loop with 1 worker and 1 ps")[0]


def _details(runs: _Runs, name: str) -> dict[str, Any]:
    extra = runs.extra[name]
    return {
        "job": "MNIST CNN, synthetic 28x28x1, global batch 128, 16 steps per call",
        "epochs": EPOCHS,
        "steps_per_epoch": STEPS_PER_EPOCH,
        "timed": "the epochs after the first (which traces the functions and connects the cluster)",
        "command_seconds_median": statistics.median(e["command_seconds"] for e in extra)
        if extra
        else None,
        "first_epoch_seconds_median": statistics.median(e["first_epoch_seconds"] for e in extra)
        if extra
        else None,
    }


HAND_MWMS, HAND_PS = "hand-written, 2 local workers", "hand-written PS"


def run_against_loops(ctx: Context) -> list[Comparison]:
    """kdist's local clusters against the same clusters running TensorFlow's tutorial loops
    (`benchmarks/mwms_loop.py`, `benchmarks/ps_loop.py`): whether the gap to one process is
    kdist's or the cluster's. Suite `cluster_loops`, run only when named in `--only`."""
    runs = _Runs(ctx)
    sides: dict[str, Callable[[], float]] = {
        ONE: runs.one,
        MWMS: runs.multi_worker,
        HAND_MWMS: runs.hand_multi_worker,
        PS: runs.parameter_server,
        HAND_PS: runs.hand_parameter_server,
    }
    rounds = ctx.rounds_for(7)
    ctx.log(f"cluster_loops: {', '.join(sides)}; {rounds} rounds of {EPOCHS} epochs each")
    before = load_average()
    samples = interleave([Case(name, fn) for name, fn in sides.items()], rounds, warmup=0)
    load = {"before": before, "after": load_average()}
    common = {
        "group": GROUP,
        "samples": samples,
        "unit": "examples/s",
        "lower_is_better": False,
        "load": load,
        "details": _details(runs, ONE),
    }
    pairs = [
        (
            "cluster/mwms2_kdist_vs_loop",
            "2 local workers: kdist / hand-written loop",
            MWMS,
            HAND_MWMS,
        ),
        (
            "cluster/mwms2_loop_vs_one_process",
            "2 local workers, hand-written / 1 process",
            HAND_MWMS,
            ONE,
        ),
        ("cluster/ps_kdist_vs_loop", "parameter server: kdist / hand-written loop", PS, HAND_PS),
        (
            "cluster/ps_loop_vs_one_process",
            "parameter server, hand-written / 1 process",
            HAND_PS,
            ONE,
        ),
        ("cluster/mwms2_vs_one_process_again", "2 local workers (kdist) / 1 process", MWMS, ONE),
        ("cluster/ps_vs_one_process_again", "parameter server (kdist) / 1 process", PS, ONE),
    ]
    return [
        summarize(id=id_, title=f"MNIST CNN, batch 128: {title}", a=a, b=b, **common)
        for id_, title, a, b in pairs
    ]


def run(ctx: Context) -> list[Comparison]:
    """Comparisons 5b (multi-worker) and 5c (parameter server)."""
    runs = _Runs(ctx)
    sides: dict[str, Callable[[], float]] = {
        ONE: runs.one,
        MWMS: runs.multi_worker,
        PS: runs.parameter_server,
    }
    rounds = ctx.rounds_for(7)
    ctx.log(f"cluster: {', '.join(sides)}; {rounds} rounds of {EPOCHS} epochs each")
    before = load_average()
    # No warm-up round: every run is a new set of processes and discards its first epoch.
    samples = interleave([Case(name, fn) for name, fn in sides.items()], rounds, warmup=0)
    load = {"before": before, "after": load_average()}
    common = {
        "group": GROUP,
        "samples": samples,
        "b": ONE,
        "unit": "examples/s",
        "lower_is_better": False,
        "load": load,
    }
    return [
        summarize(
            id="cluster/mwms2_vs_one_process",
            title="MNIST CNN, batch 128: 2 local workers (multi_worker_mirrored) / 1 process",
            a=MWMS,
            target=Target(">=", 0.9),
            details={**_details(runs, MWMS), "one_process": _details(runs, ONE)},
            **common,
        ),
        summarize(
            id="cluster/ps_vs_one_process",
            title="MNIST CNN, batch 128: parameter server (1 worker, 1 ps, 16 steps per "
            "schedule) / 1 process",
            a=PS,
            target=Target(">=", 0.8),
            details={**_details(runs, PS), "one_process": _details(runs, ONE)},
            **common,
        ),
    ]
