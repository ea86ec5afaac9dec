"""Comparisons 1, 2 and 5a: the kdist engine against a hand-written loop, Keras `fit`, and
itself under mirrored with one replica and under no strategy.

Every side trains the same job in the same process; a round is one `fit` of
`epochs x steps_per_epoch` steps on each side and the value is wall seconds per step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import tensorflow as tf

from benchmarks.context import Context
from benchmarks.harness import Case, Comparison, Target, interleave, load_average, summarize
from benchmarks.jobs import HandWrittenLoop, Job, KdistJob, KerasFit, kdist_overrides

__all__ = ["GROUP_FIT", "GROUP_LOOP", "GROUP_STRATEGY", "run"]

GROUP_LOOP = "1. kdist engine vs hand-written tf.function loop"
GROUP_FIT = "2. kdist engine vs Keras 3 model.fit"
GROUP_STRATEGY = "5. strategies on this machine"

KDIST, LOOP, FIT = "kdist", "hand-written", "keras fit"


class Side(Protocol):
    def fit(self) -> float: ...

    def trace(self) -> None: ...


@dataclass(frozen=True)
class Spec:
    """One job and the targets of its comparisons."""

    key: str
    model: str
    batch: int
    steps_per_call: int
    epochs: int
    steps_per_epoch: int
    rounds: int
    loop_target: float | None
    fit_target: float | None
    # CNN rounds are long: trace with one step instead of a whole warm-up round.
    trace_warmup: bool = False

    def job(self, ctx: Context) -> Job:
        quick_steps = max(self.steps_per_call, 8 if self.steps_per_call == 1 else 0)
        return Job(
            model=self.model,
            global_batch_size=self.batch,
            steps_per_execution=self.steps_per_call,
            epochs=ctx.scale(self.epochs, 1),
            steps_per_epoch=ctx.scale(self.steps_per_epoch, quick_steps),
        )

    def title(self, strategy: str) -> str:
        name = "MLP 784-128-10" if self.model == "mlp" else "MNIST CNN"
        calls = "1 step/call" if self.steps_per_call == 1 else f"{self.steps_per_call} steps/call"
        return f"{name}, batch {self.batch}, {calls}, {strategy}"


ONE_DEVICE = [
    Spec("mlp_k1", "mlp", 32, 1, 2, 100, 11, 1.15, 1.00),
    Spec("mlp_k32", "mlp", 32, 32, 2, 256, 11, 1.05, 1.00),
    Spec("cnn_k1", "cnn", 128, 1, 1, 4, 7, 1.03, 1.00, trace_warmup=True),
    # At 32 steps per call a CNN round is 32 steps on each side: Keras fit is left out
    # (its ratio at 1 step per call already bounds the per-call cost).
    Spec("cnn_k32", "cnn", 128, 32, 1, 32, 7, 1.03, None, trace_warmup=True),
]
MIRRORED = [
    Spec("mlp_k1", "mlp", 32, 1, 2, 100, 9, None, 1.00),
    Spec("mlp_k32", "mlp", 32, 32, 2, 256, 9, None, 1.00),
]
STRATEGY = [
    Spec("mlp_k1", "mlp", 32, 1, 2, 100, 11, None, None),
    Spec("mlp_k32", "mlp", 32, 32, 2, 256, 11, None, None),
]
# Quick mode (a smoke run) keeps one job per kind of comparison.
QUICK = {"mlp_k1"}


def _measure(
    ctx: Context, job: Job, sides: dict[str, Side], rounds: int, trace_warmup: bool
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    def per_step(side: Side) -> Callable[[], float]:
        return lambda: side.fit() / job.steps

    cases = [
        Case(name, per_step(side), setup=side.trace if trace_warmup else None)
        for name, side in sides.items()
    ]
    before = load_average()
    samples = interleave(cases, rounds, warmup=0 if trace_warmup else 1)
    return samples, {"before": before, "after": load_average()}


def _details(job: Job, **more: Any) -> dict[str, Any]:
    return {
        "model": job.model,
        "global_batch_size": job.global_batch_size,
        "steps_per_call": job.steps_per_execution,
        "steps_per_round": job.steps,
        **more,
    }


def _pairs(
    ctx: Context,
    *,
    spec: Spec,
    strategy_label: str,
    id_prefix: str,
    overrides: list[str],
    strategy_for_others: Callable[[KdistJob], tf.distribute.Strategy],
    with_loop: bool,
) -> list[Comparison | dict[str, Any]]:
    job = spec.job(ctx)
    kd = KdistJob(kdist_overrides(job, *overrides), ctx.workdir / f"{id_prefix}_{spec.key}")
    strategy = strategy_for_others(kd)
    sides: dict[str, Side] = {KDIST: kd}
    if with_loop:
        sides[LOOP] = HandWrittenLoop(job, strategy)
    title = spec.title(strategy_label)
    missing: list[dict[str, Any]] = []
    if spec.fit_target is not None:
        keras_fit = KerasFit(job, strategy)
        try:
            keras_fit.trace()
            sides[FIT] = keras_fit
        except tf.errors.InvalidArgumentError as error:
            # Keras 3.15 under MirroredStrategy with 2 replicas and steps_per_execution > 1
            # (keras-team/keras#19246); kdist runs the same job.
            ctx.log(f"{id_prefix}/{spec.key}: Keras fit failed: {str(error).splitlines()[-1]}")
            missing.append(
                {
                    "id": f"fit/{id_prefix}_{spec.key}",
                    "group": GROUP_FIT,
                    "title": title,
                    "target": f"<= {spec.fit_target:g}",
                    "reason": "Keras 3 `model.fit` itself fails on this job: InvalidArgumentError "
                    "'You must feed a value for placeholder tensor' inside "
                    "`multi_step_on_iterator` (MirroredStrategy with 2 replicas and "
                    "steps_per_execution > 1; keras-team/keras#19246). kdist trains it "
                    "(see the hand-written comparison of the same job).",
                }
            )
    rounds = ctx.rounds_for(spec.rounds)
    ctx.log(f"{id_prefix}/{spec.key}: {', '.join(sides)}; {rounds} rounds of {job.steps} steps")
    samples, load = _measure(ctx, job, sides, rounds, spec.trace_warmup)
    out: list[Comparison | dict[str, Any]] = list(missing)
    if LOOP in sides:
        out.append(
            summarize(
                id=f"loop/{id_prefix}_{spec.key}",
                group=GROUP_LOOP,
                title=title,
                samples=samples,
                a=KDIST,
                b=LOOP,
                unit="ms/step",
                scale=1000.0,
                target=None if spec.loop_target is None else Target("<=", spec.loop_target),
                load=load,
                details=_details(job),
            )
        )
    if FIT in sides:
        out.append(
            summarize(
                id=f"fit/{id_prefix}_{spec.key}",
                group=GROUP_FIT,
                title=title,
                samples=samples,
                a=KDIST,
                b=FIT,
                unit="ms/step",
                scale=1000.0,
                target=None if spec.fit_target is None else Target("<=", spec.fit_target),
                load=load,
                details=_details(job),
            )
        )
    return out


def _strategy_overhead(ctx: Context, spec: Spec) -> list[Comparison]:
    """kdist under mirrored with one replica, under no strategy and under one_device."""
    job = spec.job(ctx)
    variants = {
        "mirrored, 1 replica": ["strategy=mirrored", "strategy.devices=[/cpu:0]"],
        # The default strategy through the config's `_target_` (what "no strategy" means
        # for a tf.distribute program).
        "no strategy": ["strategy=auto", "strategy._target_=tensorflow.distribute.get_strategy"],
        "one_device": ["strategy=one_device"],
    }
    sides: dict[str, Side] = {
        name: KdistJob(
            kdist_overrides(job, *overrides),
            ctx.workdir / f"strategy_{spec.key}_{index}",
        )
        for index, (name, overrides) in enumerate(variants.items())
    }
    rounds = ctx.rounds_for(spec.rounds)
    ctx.log(f"strategy/{spec.key}: {', '.join(sides)}; {rounds} rounds of {job.steps} steps")
    samples, load = _measure(ctx, job, sides, rounds, spec.trace_warmup)
    common = {
        "group": GROUP_STRATEGY,
        "samples": samples,
        "b": "no strategy",
        "unit": "ms/step",
        "scale": 1000.0,
        "load": load,
        "details": _details(job, engine="kdist"),
    }
    return [
        summarize(
            id=f"strategy/mirrored1_vs_none_{spec.key}",
            title=spec.title("kdist engine: mirrored 1 replica / no strategy"),
            a="mirrored, 1 replica",
            target=Target("<=", 1.03),
            **common,
        ),
        summarize(
            id=f"strategy/one_device_vs_none_{spec.key}",
            title=spec.title("kdist engine: one_device / no strategy"),
            a="one_device",
            **common,
        ),
    ]


def run(ctx: Context) -> list[Comparison | dict[str, Any]]:
    """Comparisons 1, 2 and 5a (a dict for a comparison that could not be measured)."""
    results: list[Comparison | dict[str, Any]] = []
    for spec in ONE_DEVICE:
        if ctx.quick and spec.key not in QUICK:
            continue
        results += _pairs(
            ctx,
            spec=spec,
            strategy_label="one_device",
            id_prefix="one_device",
            overrides=["strategy=one_device"],
            strategy_for_others=lambda kd: kd.strategy,
            with_loop=True,
        )
    for spec in MIRRORED:
        if ctx.quick:
            continue
        results += _pairs(
            ctx,
            spec=spec,
            strategy_label="mirrored, 2 logical CPUs",
            id_prefix="mirrored2",
            overrides=["strategy=mirrored"],
            strategy_for_others=lambda kd: kd.strategy,
            with_loop=True,
        )
    for spec in STRATEGY:
        if ctx.quick and spec.key != "mlp_k32":
            continue
        results += _strategy_overhead(ctx, spec)
    return results
