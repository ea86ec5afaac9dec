"""Comparison 3: the time a whole `Experiment.fit` spends outside the step calls.

The runner's `train_steps` and `evaluate` are wrapped with timers; what remains of the
wall time of `fit` (callbacks, the controller's loop, building the callbacks, writing
`metrics.json`) is the engine's own cost, reported per epoch and as a share of the run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.context import Context
from benchmarks.harness import Case, Comparison, Target, interleave, load_average, summarize
from benchmarks.jobs import Job, KdistJob, kdist_overrides

__all__ = ["GROUP", "StepTimer", "run"]

GROUP = "3. time outside the steps (per whole fit)"


class StepTimer:
    """Wraps a runner's `train_steps` and `evaluate` and sums the seconds spent in them."""

    def __init__(self, runner: Any):
        self.seconds = 0.0
        self.calls = 0
        for name in ("train_steps", "evaluate"):
            setattr(runner, name, self._timed(getattr(runner, name)))

    def _timed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
                self.calls += 1

        return timed

    def reset(self) -> None:
        self.seconds = 0.0
        self.calls = 0


class _Measured:
    """One configuration; each round records the wall, step-call and loop seconds."""

    def __init__(self, job: Job, overrides: list[str], ctx: Context, name: str):
        self.job = job
        self.kd = KdistJob(kdist_overrides(job, *overrides), ctx.workdir / f"overhead_{name}")
        assert self.kd.experiment.runner is not None
        self.timer = StepTimer(self.kd.experiment.runner)
        self.walls: list[float] = []
        self.inside: list[float] = []
        self.loops: list[float] = []

    def round(self) -> float:
        self.timer.reset()
        wall = self.kd.fit()
        result = self.kd.experiment.result
        assert result is not None
        self.walls.append(wall)
        self.inside.append(self.timer.seconds)
        # The controller's epoch loop (from before the first epoch to after the last).
        self.loops.append(result.train_seconds)
        return wall - self.timer.seconds


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000.0, 2)


def run(ctx: Context) -> list[Comparison]:
    """Outside-the-steps time: minimal callbacks (the target), mirrored, the defaults."""
    epochs = ctx.scale(10, 2)
    job = Job(
        model="mlp",
        global_batch_size=32,
        steps_per_execution=8,
        epochs=epochs,
        steps_per_epoch=ctx.scale(64, 16),
    )
    validation = [
        "trainer.validation=true",
        "data.source.num_validation=512",
        "objective.name=val_accuracy",
        "objective.direction=max",
    ]
    variants = {
        "minimal": _Measured(job, [*validation, "callbacks=minimal"], ctx, "minimal"),
        "minimal, mirrored 2 replicas": _Measured(
            job, [*validation, "callbacks=minimal", "strategy=mirrored"], ctx, "mirrored"
        ),
        "default": _Measured(
            job,
            # The default callbacks (TensorBoard, history.csv, a checkpoint every epoch,
            # curves.png) without backups (a second `fit` in the same run directory
            # would resume from the first one's) and without the final model export
            # (once per run, not per epoch).
            [
                *validation,
                "callbacks=default",
                "callbacks.backup.enabled=false",
                "callbacks.save_model=false",
            ],
            ctx,
            "default",
        ),
    }
    if ctx.quick:
        del variants["minimal, mirrored 2 replicas"]
    rounds = ctx.rounds_for(7)
    ctx.log(f"overhead: {rounds} rounds of {epochs} epochs x {job.steps_per_epoch} steps")
    before = load_average()
    samples = interleave(
        [Case(name, measured.round) for name, measured in variants.items()], rounds
    )
    load = {"before": before, "after": load_average()}
    results = []
    for name, measured in variants.items():
        walls = measured.walls[-rounds:]
        inside = measured.inside[-rounds:]
        loops = measured.loops[-rounds:]
        shares = [(w - i) / w for w, i in zip(walls, inside, strict=True)]
        details = {
            "callbacks": name,
            "epochs": epochs,
            "steps_per_epoch": job.steps_per_epoch,
            "steps_per_call": job.steps_per_execution,
            "validation": "512 examples, every epoch (its calls count as step calls)",
            # Once per fit: building the callbacks, writing metrics.json (and config.yaml
            # outside a Hydra app); in the loop: hooks, metric resets, epoch ends.
            "once_per_fit_ms_median": _median_ms(
                [w - lp for w, lp in zip(walls, loops, strict=True)]
            ),
            "epoch_loop_ms_per_epoch_median": _median_ms(
                [(lp - i) / epochs for lp, i in zip(loops, inside, strict=True)]
            ),
            "wall_seconds": walls,
            "step_call_seconds": inside,
        }
        is_target = name == "minimal"
        key = name.replace(", ", "_").replace(" ", "_")
        results.append(
            summarize(
                id=f"overhead/{key}_ms_per_epoch",
                group=GROUP,
                title=f"MLP, batch 32, 8 steps/call, {epochs} epochs of {job.steps_per_epoch} "
                f"steps, callbacks={name}: ms per epoch outside the step calls",
                samples={name: [s / epochs for s in samples[name]]},
                a=name,
                b=None,
                unit="ms/epoch",
                scale=1000.0,
                target=Target("<=", 5.0) if is_target else None,
                load=load,
                details=details,
            )
        )
        results.append(
            summarize(
                id=f"overhead/{key}_share",
                group=GROUP,
                title=f"callbacks={name}: share of the fit's wall time outside the step calls",
                samples={name: shares},
                a=name,
                b=None,
                unit="%",
                scale=100.0,
                target=Target("<=", 2.0) if is_target else None,
                load=load,
                details=details,
            )
        )
    return results
