"""Comparison 6: time from the command to the end of the first step, and to the help.

`python -m kdist.train trainer.epochs=1` (the default job: the MLP on the embedded
digits, default callbacks) against `python -m benchmarks.plain_script` (the same job in
plain Keras). Both print a probe line when the first call of the train function ends;
the time is that moment minus the moment just before the process was started.

`kdist train --help` and `kdist tune --help` against `kdist --version` (issue 44's target:
the train help within 6x the version), whole commands, interleaved; Hydra's own help path
(`kdist.config.fast_help` not installed, the same text) is measured beside them, for the
record of what the patch saves.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.context import Context
from benchmarks.harness import Case, Comparison, Target, interleave, load_average, summarize
from benchmarks.processes import Finished, run_command

__all__ = ["GROUP", "run"]

GROUP = "6. start-up: command to first step"

KDIST, PLAIN = "python -m kdist.train", "plain Keras script"

VERSION, TRAIN_HELP, TUNE_HELP = "kdist --version", "kdist train --help", "kdist tune --help"
HYDRA_HELP = "kdist train --help, Hydra's get_help"
# Issue 44: `kdist train --help` within 6x `kdist --version`.
HELP_TARGET = Target("<=", 6.0)
# `kdist train --help` with Hydra's own `get_help` (every group listed twice, unprinted).
_UNPATCHED = (
    "import sys; import kdist.config.fast_help as f; f.install = lambda: None; "
    "sys.argv = ['kdist', 'train', '--help']; from kdist.command import main; main()"
)


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


def _whole(args: list[str], ctx: Context, what: str) -> float:
    done = run_command(args, cwd=ctx.workdir)
    done.check(what)
    return done.seconds


def help_comparisons(ctx: Context) -> list[Comparison]:
    """The help rows: each help command's seconds over `kdist --version`'s, per round."""
    rounds = ctx.rounds_for(9)
    ctx.log(f"startup: {TRAIN_HELP}, {TUNE_HELP}, {HYDRA_HELP} vs {VERSION}; {rounds} rounds")
    before = load_average()
    commands = {
        VERSION: ["-m", "kdist", "--version"],
        TRAIN_HELP: ["-m", "kdist", "train", "--help"],
        TUNE_HELP: ["-m", "kdist", "tune", "--help"],
        HYDRA_HELP: ["-c", _UNPATCHED],
    }
    cases = [
        Case(name, lambda args=args, name=name: _whole(args, ctx, name))
        for name, args in commands.items()
    ]
    samples = interleave(cases, rounds, warmup=1)
    load = {"before": before, "after": load_average()}
    rows = []
    for name, row_id, target in (
        (TRAIN_HELP, "startup/train_help_vs_version", HELP_TARGET),
        (TUNE_HELP, "startup/tune_help_vs_version", None),
        (HYDRA_HELP, "startup/train_help_hydra_get_help_vs_version", None),
    ):
        rows.append(
            summarize(
                id=row_id,
                group=GROUP,
                title=f"{name}: seconds of the whole command over {VERSION}'s",
                samples={name: samples[name], VERSION: samples[VERSION]},
                a=name,
                b=VERSION,
                unit="s",
                target=target,
                load=load,
                note="Hydra's help path, the same text: for the record"
                if name == HYDRA_HELP
                else "",
            )
        )
    return rows


def run(ctx: Context) -> list[Comparison]:
    """Comparison 6: the first step (no target: for information) and the help rows."""
    help_rows = help_comparisons(ctx)
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
        *help_rows,
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
        ),
    ]
