"""Launchers: a 2-job sweep on Hydra's joblib launcher against the basic launcher.

`python -m kdist.train -m hydra/launcher=joblib hydra.launcher.n_jobs=2 ...` runs the
jobs in 2 worker processes side by side; the basic launcher runs the same 2 jobs one
after another in the command's process. Each worker is a new Python process that
imports TensorFlow and kdist before its job starts: the target is that joblib is not
slower than basic by more than that start-up, i.e. (joblib - start-up) / basic <= 1.
The start-up is measured in the same round, as `python -c "import ..."` of what a worker
process imports once before its job's first step (TensorFlow, kdist, and for the default
job scikit-learn's digits, keras-tuner and TensorBoard: listed by running a job in a
process that had imported TensorFlow and kdist already); the basic launcher pays it once.

    python -m benchmarks --only launchers --rounds 3 --out /tmp/bench
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.context import Context
from benchmarks.harness import Case, Comparison, Target, interleave, load_average, summarize
from benchmarks.processes import run_command

__all__ = ["GROUP", "run"]

GROUP = "9. launchers: a 2-job sweep side by side"

JOBLIB, BASIC = "joblib (n_jobs=2) minus one process start-up", "basic launcher"
# The same 2 jobs on both sides: the default job (MLP on the digits), 3 epochs each.
JOBS = ["optimizer.learning_rate=1e-3,3e-3", "trainer.epochs=3", "trainer.verbose=0"]
IMPORTS = (
    "import tensorflow, kdist.train, kdist.experiment, sklearn.datasets, keras_tuner, "
    "tensorboard.plugins.hparams.api"
)


class _Runs:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.count = 0
        self.raw: dict[str, list[float]] = {"joblib": [], "basic": [], "start-up": []}

    def _sweep(self, launcher: list[str]) -> float:
        self.count += 1
        sweep = self.ctx.workdir / f"launchers_{self.count:02d}"
        done = run_command(
            ["-m", "kdist.train", "-m", *launcher, *JOBS, f"hydra.sweep.dir={sweep}"],
            cwd=self.ctx.workdir,
        )
        done.check(f"the sweep {' '.join(launcher) or '(basic)'}")
        return done.seconds

    def joblib(self) -> float:
        start = run_command(["-c", IMPORTS], cwd=self.ctx.workdir)
        start.check("the start-up probe")
        seconds = self._sweep(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"])
        self.raw["start-up"].append(start.seconds)
        self.raw["joblib"].append(seconds)
        return seconds - start.seconds

    def basic(self) -> float:
        seconds = self._sweep([])
        self.raw["basic"].append(seconds)
        return seconds


def run(ctx: Context) -> list[Comparison]:
    """Comparison 9: (joblib - start-up) / basic, target <= 1."""
    runs = _Runs(ctx)
    rounds = ctx.rounds_for(5)
    ctx.log(f"launchers: {JOBLIB} vs {BASIC}; {rounds} rounds")
    before = load_average()
    samples = interleave([Case(JOBLIB, runs.joblib), Case(BASIC, runs.basic)], rounds, warmup=1)
    details: dict[str, Any] = {
        "jobs": "2 default jobs (MLP on the digits), 3 epochs each: " + " ".join(JOBS),
        "start_up_command": f'python -c "{IMPORTS}"',
        "whole_command_seconds_median": {
            name: statistics.median(values) for name, values in runs.raw.items() if values
        },
        "whole_command_seconds": runs.raw,
    }
    return [
        summarize(
            id="launchers/joblib_vs_basic_2_jobs",
            group=GROUP,
            title="2-job sweep: seconds of the command (joblib's minus one process start-up)",
            samples=samples,
            a=JOBLIB,
            b=BASIC,
            unit="s",
            target=Target("<=", 1.0),
            load={"before": before, "after": load_average()},
            details=details,
        )
    ]
