"""Comparison 6: time from the command to the end of the first step.

`python -m kdist.train trainer.epochs=1` (the default job: the MLP on the embedded
digits, default callbacks) against `python -m benchmarks.plain_script` (the same job in
plain Keras). Both print a probe line when the first call of the train function ends;
the time is that moment minus the moment just before the process was started.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.context import Context
from benchmarks.harness import Case, Comparison, interleave, load_average, summarize
from benchmarks.processes import Finished, run_command

__all__ = ["GROUP", "run"]

GROUP = "6. start-up: command to first step"

KDIST, PLAIN = "python -m kdist.train", "plain Keras script"


def _first_step(done: Finished, what: str) -> float:
    done.check(what)
    marks = [float(fields["time"]) for kind, fields in done.lines if kind == "first_step"]
    if not marks:
        raise RuntimeError(f"{what} printed no first-step line:\n{done.output[-2000:]}")
    return marks[0] - done.started


class _Runs:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.count = 0
        self.totals: dict[str, list[float]] = {KDIST: [], PLAIN: []}

    def kdist(self) -> float:
        self.count += 1
        run_dir = self.ctx.workdir / f"startup_{self.count:02d}"
        done = run_command(
            [
                "-m",
                "kdist.train",
                "trainer.epochs=1",
                "callbacks.extra=[{_target_:benchmarks.probes.FirstStepMarker}]",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=self.ctx.workdir,
        )
        self.totals[KDIST].append(done.seconds)
        return _first_step(done, KDIST)

    def plain(self) -> float:
        done = run_command(["-m", "benchmarks.plain_script"], cwd=self.ctx.workdir)
        self.totals[PLAIN].append(done.seconds)
        return _first_step(done, PLAIN)


def run(ctx: Context) -> list[Comparison]:
    """Comparison 6 (no target in the issue: reported for information)."""
    runs = _Runs(ctx)
    rounds = ctx.rounds_for(7)
    ctx.log(f"startup: {KDIST} vs {PLAIN}; {rounds} rounds")
    before = load_average()
    samples = interleave([Case(KDIST, runs.kdist), Case(PLAIN, runs.plain)], rounds, warmup=1)
    details: dict[str, Any] = {
        "job": "MLP 64-128-10 on the 8x8 digits (kdist's default job), batch 64, 8 steps/call",
        "kdist_command": "python -m kdist.train trainer.epochs=1 (default callbacks)",
        "whole_command_seconds_median": {
            name: statistics.median(values) for name, values in runs.totals.items()
        },
    }
    return [
        summarize(
            id="startup/kdist_train_vs_plain_script",
            group=GROUP,
            title="default job (MLP on digits): seconds from the command to the first step",
            samples=samples,
            a=KDIST,
            b=PLAIN,
            unit="s",
            load={"before": before, "after": load_average()},
            details=details,
        )
    ]
