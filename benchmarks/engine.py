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
    Spec("mlp_k32", "mlp", 32, 32, 2, 160, 11, 1.05, 1.00),
    Spec("cnn_k1", "cnn", 128, 1, 1, 6, 7, 1.03, 1.00, trace_warmup=True),
    # At 32 steps per call a CNN round is 32 steps on each side: Keras fit is left out
    # (its ratio at 1 step per call already bounds the per-call cost).
    Spec("cnn_k32", "cnn", 128, 32, 1, 32, 7, 1.03, None, trace_warmup=True),
]
MIRRORED = [
    Spec("mlp_k1", "mlp", 32, 1, 2, 100, 7, None, 1.00),
    Spec("mlp_k32", "mlp", 32, 32, 2, 160, 7, None, 1.00),
]
STRATEGY = [
    Spec("mlp_k1", "mlp", 32, 1, 2, 100, 9, None, None),
    Spec("mlp_k32", "mlp", 32, 32, 2, 160, 9, None, None),
]
# Quick mode (a smoke run) keeps one job per kind of comparison.
QUICK = {"mlp_k1"}


@dataclass
class Measured:
    """Interleaved samples (seconds per step), CPU seconds per round and the load."""

    samples: dict[str, list[float]]
    cpu: dict[str, list[float]]
    load: dict[str, list[float]]


def _measure(
    ctx: Context, job: Job, sides: dict[str, Side], rounds: int, trace_warmup: bool
) -> Measured:
    def per_step(side: Side) -> Callable[[], float]:
        return lambda: side.fit() / job.steps

    cases = [
        Case(name, per_step(side), setup=side.trace if trace_warmup else None)
        for name, side in sides.items()
    ]
    before = load_average()
    cpu: dict[str, list[float]] = {}
    samples = interleave(cases, rounds, warmup=0 if trace_warmup else 1, cpu=cpu)
    return Measured(samples, cpu, {"before": before, "after": load_average()})


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
    measured = _measure(ctx, job, sides, rounds, spec.trace_warmup)
    out: list[Comparison | dict[str, Any]] = list(missing)
    if LOOP in sides:
        # Step time: kdist's epoch loop (what `fit` spends from the first epoch to the
        # last) against the hand-written loop, which has no set-up of its own. The
        # once-per-fit cost around kdist's loop is comparison 3's subject.
        loop_samples = {
            KDIST: [s / job.steps for s in kd.loop_seconds[-rounds:]],
            LOOP: measured.samples[LOOP],
        }
        out.append(
            summarize(
                id=f"loop/{id_prefix}_{spec.key}",
                group=GROUP_LOOP,
                title=title,
                samples=loop_samples,
                cpu=measured.cpu,
                a=KDIST,
                b=LOOP,
                unit="ms/step",
                scale=1000.0,
                target=None if spec.loop_target is None else Target("<=", spec.loop_target),
                load=measured.load,
                details=_details(
                    job,
                    kdist_whole_fit_vs_loop=summarize(
                        id="",
                        group="",
                        title="",
                        samples=measured.samples,
                        a=KDIST,
                        b=LOOP,
                        unit="",
                    ).ratio,
                    cpu="CPU A/B is over the whole call (for kdist its set-up too)",
                ),
            )
        )
    if FIT in sides:
        out.append(
            summarize(
                id=f"fit/{id_prefix}_{spec.key}",
                group=GROUP_FIT,
                title=title,
                samples=measured.samples,
                cpu=measured.cpu,
                a=KDIST,
                b=FIT,
                unit="ms/step",
                scale=1000.0,
                target=None if spec.fit_target is None else Target("<=", spec.fit_target),
                load=measured.load,
                details=_details(job),
            )
        )
    return out


def _strategy_overhead(ctx: Context, spec: Spec) -> list[Comparison]:
    """Mirrored with one replica vs no strategy, for kdist and for the hand-written loop.

    The hand-written pair shows how much of the difference is TensorFlow's own cost of
    the strategy (the same for any loop) rather than kdist's.
    """
    job = spec.job(ctx)
    variants = {
        "kdist, mirrored 1 replica": ["strategy=mirrored", "strategy.devices=[/cpu:0]"],
        # The default strategy through the config's `_target_` (what "no strategy" means
        # for a tf.distribute program).
        "kdist, no strategy": [
            "strategy=auto",
            "strategy._target_=tensorflow.distribute.get_strategy",
        ],
        "kdist, one_device": ["strategy=one_device"],
    }
    sides: dict[str, Side] = {
        name: KdistJob(
            kdist_overrides(job, *overrides),
            ctx.workdir / f"strategy_{spec.key}_{index}",
        )
        for index, (name, overrides) in enumerate(variants.items())
    }
    sides["hand-written, mirrored 1 replica"] = HandWrittenLoop(
        job, tf.distribute.MirroredStrategy(["/cpu:0"])
    )
    sides["hand-written, no strategy"] = HandWrittenLoop(job, tf.distribute.get_strategy())
    rounds = ctx.rounds_for(spec.rounds)
    ctx.log(f"strategy/{spec.key}: {', '.join(sides)}; {rounds} rounds of {job.steps} steps")
    measured = _measure(ctx, job, sides, rounds, spec.trace_warmup)
    # kdist's epoch loop, as in comparison 1 (the once-per-fit set-up is comparison 3's).
    samples = {
        name: [s / job.steps for s in side.loop_seconds[-rounds:]]
        if isinstance(side, KdistJob)
        else measured.samples[name]
        for name, side in sides.items()
    }
    common = {
        "group": GROUP_STRATEGY,
        "samples": samples,
        "cpu": measured.cpu,
        "unit": "ms/step",
        "scale": 1000.0,
        "load": measured.load,
        "details": _details(job),
    }
    return [
        summarize(
            id=f"strategy/mirrored1_vs_none_{spec.key}",
            title=spec.title("kdist: mirrored 1 replica / no strategy"),
            a="kdist, mirrored 1 replica",
            b="kdist, no strategy",
            target=Target("<=", 1.03),
            **common,
        ),
        summarize(
            id=f"strategy/loop_mirrored1_vs_none_{spec.key}",
            title=spec.title("hand-written loop: mirrored 1 replica / no strategy"),
            a="hand-written, mirrored 1 replica",
            b="hand-written, no strategy",
            **common,
        ),
        summarize(
            id=f"strategy/one_device_vs_none_{spec.key}",
            title=spec.title("kdist: one_device / no strategy"),
            a="kdist, one_device",
            b="kdist, no strategy",
            **common,
        ),
        summarize(
            id=f"strategy/kdist_vs_loop_none_{spec.key}",
            title=spec.title("no strategy: kdist / hand-written loop"),
            a="kdist, no strategy",
            b="hand-written, no strategy",
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
