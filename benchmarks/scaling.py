"""Suite `scaling`: when a cluster pays, and what makes a step cheaper to distribute.

Run with `python -m benchmarks --only scaling` (add `--quick` for the 2-core form: one
round of each cluster, shorter curves). Four parts, each interleaved in one process:

1. **Row-sparse Adam** (in process): one training step of a recommender whose table has
   1M x 32 rows, about 2,000 of them looked up per batch, with `LazyAdam`
   (`optimizer.sparse_updates=true`) against Keras's Adam. Target: at least 5x faster.
2. **bfloat16 all-reduce** (in process, mirrored over 2 logical CPUs): the bytes each
   replica hands the all-reduce per step (counted while tracing, `kdist.strategies.
   compression`), and the loss curves of 300 steps of the MNIST CNN against float32's:
   on the digits, over 12 seeds, bfloat16 with error feedback (the default) and without,
   and a control, float32 with every gradient element changed by a random relative 1e-6
   at every step, which says how far a curve moves for a change far below bfloat16's
   rounding. One run's last epochs (loss near 0.02) move by 1-8 % under bfloat16's
   rounding and one float32 run's by 15-60 % from float32's average, so the curves are
   compared averaged over 12 seeds; on synthetic 28x28 data, one seed, recorded.
   Targets: half the bytes; every epoch's loss of the averaged digits curve within 2 %.
3. **Local clusters** (processes, `kdist.launch`): the CNN of `benchmarks.cluster` in one
   process, on 2 and 4 multi-worker-mirrored workers (float32 and bfloat16 all-reduce,
   the latter with and without error feedback; `KDIST_SCALING_FORM=allreduce` runs only
   those and one process),
   on parameter-server clusters of 2 workers with 1 and 2 ps, and TensorFlow's own
   tutorial loops on 2 workers and on 2 workers + 1 ps. Each row: examples/s and its
   ratio to one process or to TensorFlow's loop; `details` holds the milliseconds a step
   spends over perfect scaling (the cluster's step time minus one process's divided by
   the workers: communication and contention).
4. **The recommender on clusters** (processes): wide-and-deep with a 1M-row table,
   `optimizer.sparse_updates=true`, in one process and on 2 workers + 2 ps (the tables
   sharded over the ps) and 2 multi-worker workers.

On 2 cores every task of a local cluster shares the same cores with the others, so the
cluster rows say what the cluster costs, not what it would gain with cores of its own
(`../shared/DEVICE.md`: the 16-core machine). The full form is the same with 5 rounds.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.cluster import BATCH, JOB, STEPS_PER_EPOCH, _throughput
from benchmarks.context import Context
from benchmarks.harness import Case, Comparison, Target, interleave, load_average, summarize
from benchmarks.processes import launch_cluster, run_command
from kdist.launcher.tasks import PIN_CORES_ENV

__all__ = ["GROUP", "run"]

GROUP = "9. scaling: clusters, sparse updates, compressed all-reduce"

TABLE_ROWS, TABLE_DIM, IDS_PER_BATCH = 1_000_000, 32, 2048


# -- 1. row-sparse Adam ---------------------------------------------------------------


def _embedding_step(lazy: bool) -> Callable[[], float]:
    """A recommender's train step (ids -> 1M x 32 table -> mean -> dense -> logit)."""
    import keras
    import numpy as np
    import tensorflow as tf

    from kdist.modeling.lazy_optimizers import LazyAdam, sparse_lookups

    fields = 8
    inputs = keras.Input((fields,), dtype="int32")
    x = keras.layers.Embedding(TABLE_ROWS, TABLE_DIM, name="table")(inputs)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(64, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(1)(x))
    optimizer = LazyAdam(1e-3) if lazy else keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    if lazy:
        sparse_lookups(model)
    rng = np.random.default_rng(0)
    batches = [
        (
            tf.constant(rng.integers(0, TABLE_ROWS, size=(IDS_PER_BATCH // fields, fields))),
            tf.constant(rng.integers(0, 2, size=(IDS_PER_BATCH // fields, 1)).astype("float32")),
        )
        for _ in range(4)
    ]
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function
    def step(ids: tf.Tensor, labels: tf.Tensor) -> None:
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(ids, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    steps = 8

    def one_round() -> float:
        started = time.perf_counter()
        for i in range(steps):
            step(*batches[i % len(batches)])
        _ = float(optimizer.iterations.numpy())  # wait for the last step
        return (time.perf_counter() - started) / steps

    return one_round


def _sparse_updates(ctx: Context) -> list[Comparison]:
    lazy, dense = "LazyAdam (sparse_updates)", "Keras Adam"
    cases = [Case(lazy, _embedding_step(True)), Case(dense, _embedding_step(False))]
    rounds = ctx.rounds_for(7)
    ctx.log(f"scaling: row-sparse Adam, {rounds} rounds of 8 steps")
    before = load_average()
    samples = interleave(cases, rounds)
    return [
        summarize(
            id="scaling/lazy_adam_step",
            group=GROUP,
            title=f"a step with a {TABLE_ROWS:,} x {TABLE_DIM} table, {IDS_PER_BATCH} ids a "
            "batch: LazyAdam / Adam",
            samples=samples,
            a=lazy,
            b=dense,
            unit="ms/step",
            scale=1000.0,
            target=Target("<=", 0.2),
            load={"before": before, "after": load_average()},
            details={"rows": TABLE_ROWS, "dim": TABLE_DIM, "ids_per_batch": IDS_PER_BATCH},
        )
    ]


# -- 2. bfloat16 all-reduce ------------------------------------------------------------


def _perturb_all_reduce(optimizer: Any, size: float) -> None:
    """Make `optimizer` move each gradient element by up to `size` before its all-reduce.

    The control of the loss curves: how far a curve moves for a change of the gradients far
    below bfloat16's rounding (a relative 1e-6 against its 2**-9). Each element is multiplied
    by 1 + size * u, u uniform in (-1, 1) and drawn again at every step, on every replica:
    Adam divides each element by its own running scale, so any fixed factor, even one per
    element, would leave its steps as they were. The sum itself is the optimizer's (Keras's,
    or what `compress_all_reduce` installed).
    """
    import tensorflow as tf

    from kdist.compat.keras_private import replace_all_reduce

    inner = getattr(optimizer, "inner_optimizer", optimizer)
    reduce = inner._all_reduce_sum_gradients

    def all_reduce_sum(grads_and_vars: Any) -> Any:
        context = tf.distribute.get_replica_context()
        if context is None:
            return reduce(grads_and_vars)
        step = tf.cast(inner.iterations, tf.int64)
        replica = tf.cast(context.replica_id_in_sync_group, tf.int64)
        moved = []
        for i, (grad, variable) in enumerate(grads_and_vars):
            if grad is not None:
                grad = tf.convert_to_tensor(grad)
                seed = tf.stack([step, replica * 100_003 + i])
                noise = tf.random.stateless_uniform(tf.shape(grad), seed, -1.0, 1.0, grad.dtype)
                grad = grad * (1.0 + size * noise)
            moved.append((grad, variable))
        return reduce(moved)

    replace_all_reduce(inner, all_reduce_sum)


def _cnn_curve(
    ctx: Context,
    dtype: str,
    steps_per_epoch: int,
    epochs: int,
    data: tuple[str, ...] = (),
    *,
    feedback: bool = True,
    perturb: float = 0.0,
    seed: int = 42,
) -> dict[str, Any]:
    import kdist
    from kdist.strategies.compression import compress_all_reduce, reduced_bytes

    name = f"{dtype}{'' if feedback else '_plain'}{'_perturbed' if perturb else ''}"
    cfg = kdist.compose(
        [
            "runtime.logical_devices=2",
            "strategy=mirrored",
            "model=cnn",
            *(
                data
                or ("data=synthetic", "data.source.num_train=4096", "data.source.num_validation=0")
            ),
            "trainer.validation=false",
            "objective.name=loss",
            "objective.direction=min",
            "trainer.global_batch_size=64",
            "trainer.steps_per_execution=10",
            f"trainer.steps_per_epoch={steps_per_epoch}",
            f"trainer.epochs={epochs}",
            "trainer.verbose=0",
            "callbacks=minimal",
            f"trainer.allreduce_dtype={dtype}",
            f"trainer.allreduce_error_feedback={str(feedback).lower()}",
            f"runtime.seed={seed}",
            f"run_dir={ctx.workdir / f'scaling_curve_{name}_{len(data)}_{seed}'}",
        ]
    )
    exp = kdist.Experiment(cfg)
    exp.build_model()
    if reduced_bytes(exp.optimizer) is None:  # float32: count without casting
        compress_all_reduce(exp.optimizer, dtype)
    if perturb:
        _perturb_all_reduce(exp.optimizer, perturb)
    started = time.perf_counter()
    history = exp.fit()
    seconds = time.perf_counter() - started
    counter = reduced_bytes(exp.optimizer)
    assert counter is not None
    return {
        "loss": [float(v) for v in history.history["loss"]],
        "bytes_per_step": counter.per_step,
        "seconds": seconds,
    }


def _largest(a: list[float], b: list[float]) -> float:
    """The largest relative difference of an epoch's loss in `a` from the same in `b`."""
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


def _mean_curve(curves: list[list[float]]) -> list[float]:
    """Each epoch's loss averaged over the runs (one per seed)."""
    return [statistics.fmean(epoch) for epoch in zip(*curves, strict=True)]


# The change of the gradients the control curves make: far below bfloat16's rounding.
PERTURBATION = 1e-6
# The digits curves are compared averaged over these seeds (model, shuffle). One run's last
# epochs (loss near 0.02) move by 1-8 % under bfloat16's rounding, with feedback or without,
# and one float32 run's by 15-60 % from float32's average: a single pair of runs says where
# two trajectories parted, the averages whether bfloat16 trains worse. The mean of 12 runs
# leaves about a third of one run's spread (8 seeds measured 0.9-1.9 % in four draws).
CURVE_SEEDS = tuple(range(12))
CURVE_SIDES: dict[str, dict[str, Any]] = {
    "float32": {"dtype": "float32"},
    "bfloat16": {"dtype": "bfloat16"},
    "bfloat16 without feedback": {"dtype": "bfloat16", "feedback": False},
    "control": {"dtype": "float32", "perturb": PERTURBATION},
}


def _compressed_all_reduce(ctx: Context) -> list[Comparison]:
    epochs, steps = 10, 30  # 300 steps in both forms: the target is about the curve
    ctx.log(f"scaling: CNN curves, mirrored 2 replicas, {epochs * steps} steps, f32 and bf16")
    before = load_average()
    details: dict[str, Any] = {
        "perturbation": PERTURBATION,
        "control": "float32 with every gradient element multiplied by 1 + perturbation x "
        "u, u uniform in (-1, 1) drawn at every step: how far the curve moves for a change "
        "far below bfloat16's rounding",
        "seeds": list(CURVE_SEEDS),
    }
    # The 28x28 job (the MNIST CNN on synthetic data, 13 MB of gradients) counts the bytes
    # and draws one curve: it sits on a plateau near ln 10 until a step escapes it, and
    # when depends on the smallest change, so its curve is recorded, not judged.
    full = _cnn_curve(ctx, "float32", steps, epochs)
    half = _cnn_curve(ctx, "bfloat16", steps, epochs)
    details["synthetic"] = {
        "loss_float32": full["loss"],
        "loss_bfloat16": half["loss"],
        "largest_relative_difference": _largest(half["loss"], full["loss"]),
        "fit_seconds": {"float32": full["seconds"], "bfloat16": half["seconds"]},
    }
    # The digits CNN learns in 300 steps (loss 1.7 -> 0.02): each side on every seed.
    curves: dict[str, list[list[float]]] = {side: [] for side in CURVE_SIDES}
    for seed in CURVE_SEEDS:
        for side, options in CURVE_SIDES.items():
            digits = ("data=digits",)
            run = _cnn_curve(
                ctx, steps_per_epoch=steps, epochs=epochs, data=digits, seed=seed, **options
            )
            curves[side].append(run["loss"])
    reference = _mean_curve(curves["float32"])
    averaged = {side: _largest(_mean_curve(runs), reference) for side, runs in curves.items()}
    one_seed = {
        side: [_largest(run, base) for run, base in zip(runs, curves["float32"], strict=True)]
        for side, runs in curves.items()
    }
    spread = [_largest(run, reference) for run in curves["float32"]]
    details["digits"] = {
        "loss": curves,
        "float32_run_from_float32_mean": spread,
        "largest_relative_difference_of_the_mean_curves": averaged,
        "largest_relative_difference_per_seed": one_seed,
    }
    load = {"before": before, "after": load_average()}

    def median_one(side: str) -> str:
        return f"{100 * statistics.median(one_seed[side]):.2f} %"

    return [
        summarize(
            id="scaling/allreduce_bf16_bytes",
            group=GROUP,
            title="bytes each replica all-reduces per step (CNN): bfloat16 / float32",
            samples={"bfloat16": [half["bytes_per_step"]], "float32": [full["bytes_per_step"]]},
            a="bfloat16",
            b="float32",
            unit="bytes/step",
            target=Target("<=", 0.5),
            load=load,
            details=details,
        ),
        summarize(
            id="scaling/allreduce_bf16_curve_digits",
            group=GROUP,
            title=f"MNIST CNN on the 8x8 digits (loss 1.7 -> 0.02), {epochs * steps} steps, "
            f"averaged over {len(CURVE_SEEDS)} seeds: largest relative difference of an "
            "epoch's loss from float32's, bfloat16 all-reduce (error feedback, the default)",
            samples={"bfloat16 vs float32": [averaged["bfloat16"]]},
            a="bfloat16 vs float32",
            b=None,
            unit="%",
            scale=100.0,
            target=Target("<=", 2.0),
            load=load,
            details=details,
            note=f"Without error feedback: {100 * averaged['bfloat16 without feedback']:.2f} "
            f"%; the control (float32, each gradient element x (1 + {PERTURBATION:g} u)): "
            f"{100 * averaged['control']:.2f} %. One seed at a time (median over the seeds): "
            f"bfloat16 {median_one('bfloat16')}, without feedback "
            f"{median_one('bfloat16 without feedback')}, control {median_one('control')}; "
            f"one float32 run from float32's average: {100 * statistics.median(spread):.1f} %",
        ),
        summarize(
            id="scaling/allreduce_bf16_curve",
            group=GROUP,
            title=f"MNIST CNN on synthetic 28x28x1, {epochs * steps} steps, one seed: largest "
            "relative difference of an epoch's loss from float32's, bfloat16 all-reduce "
            "(a plateau near ln 10: recorded, not judged)",
            samples={"bfloat16 vs float32": [details["synthetic"]["largest_relative_difference"]]},
            a="bfloat16 vs float32",
            b=None,
            unit="%",
            scale=100.0,
            load=load,
            details=details,
        ),
    ]


# -- 3 and 4. local clusters -----------------------------------------------------------

ONE = "1 process"
MWMS2, MWMS2_BF16, MWMS4 = "2 MWMS workers", "2 MWMS workers, bf16 all-reduce", "4 MWMS workers"
MWMS2_UNPINNED = "2 MWMS workers, not pinned"
PS1, PS2 = "PS: 2 workers + 1 ps", "PS: 2 workers + 2 ps"
TF_MWMS2, TF_PS1 = "TF loop, 2 MWMS workers", "TF loop, PS 2 workers + 1 ps"
TF_MWMS2_UNPINNED = "TF loop, 2 MWMS workers, not pinned"

# TensorFlow's packing (`strategy.bytes_per_pack`): 1.07x bf16 alone on the 16-core machine, as
# fast as kdist's own last-layers-first buckets (1.05x), which were dropped
# (benchmarks/results/scaling-device-16core-buckets.md).
MWMS2_BF16_PACKS = "2 MWMS workers, bf16, bytes_per_pack 1 MB"
MWMS2_BF16_PLAIN = "2 MWMS workers, bf16 without error feedback"

# `KDIST_SCALING_FORM=device`: the runs of the 16-core targets only, for the lent machine's
# 15-minute budget (`../shared/DEVICE.md`); with `KDIST_BENCH_BATCH=256` as measured there.
DEVICE_FORM = (
    "1 process",
    "2 MWMS workers",
    "2 MWMS workers, bf16 all-reduce",
    "2 MWMS workers, bf16, bytes_per_pack 1 MB",
    "2 MWMS workers, not pinned",
    "PS: 2 workers + 1 ps",
    "TF loop, 2 MWMS workers",
    "recommender, 1 process",
    "recommender, PS 2+2",
    "2 MWMS workers, bf16 without error feedback",
)
# `KDIST_SCALING_FORM=allreduce`: float32 against bfloat16 with and without error feedback.
ALLREDUCE_FORM = (
    "1 process",
    "2 MWMS workers",
    "2 MWMS workers, bf16 all-reduce",
    "2 MWMS workers, bf16 without error feedback",
)

RECOMMENDER = [
    "model=wide_deep",
    f"model.num_buckets={TABLE_ROWS}",
    f"model.embedding_dim={TABLE_DIM}",
    "data=categorical",
    "data.source.num_train=16384",
    "data.source.num_validation=0",
    f"data.source.vocab_size={TABLE_ROWS}",
    "data.source.skew=0.5",
    "optimizer.sparse_updates=true",
    "trainer.validation=false",
    "objective.name=loss",
    "objective.direction=min",
    "trainer.global_batch_size=256",  # 8 fields: 2,048 ids a step
    "trainer.steps_per_execution=16",
    f"trainer.steps_per_epoch={STEPS_PER_EPOCH}",
    "trainer.epochs=2",
    "trainer.verbose=0",
    "callbacks=minimal",
    "callbacks.extra=[{_target_:benchmarks.probes.EpochTimer,"
    f"steps_per_epoch:{STEPS_PER_EPOCH},global_batch_size:256}}]",
]
REC_ONE, REC_PS2, REC_MWMS2 = "recommender, 1 process", "recommender, PS 2+2", "recommender, 2 MWMS"


class _Clusters:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.count = 0

    def _dir(self, tag: str) -> Any:
        self.count += 1
        return self.ctx.workdir / f"scaling_{self.count:02d}_{tag}"

    def one(self, job: list[str]) -> Callable[[], float]:
        def side() -> float:
            run_dir = self._dir("one")
            done = run_command(
                ["-m", "kdist.train", *job, "strategy=one_device", f"hydra.run.dir={run_dir}"],
                cwd=self.ctx.workdir,
            )
            return _throughput(done, "python -m kdist.train")[0]

        return side

    def cluster(
        self,
        job: list[str],
        *,
        workers: int,
        ps: int,
        more: tuple[str, ...] = (),
        module: str = "",
        pinned: bool = True,
        env: dict[str, str] | None = None,
    ) -> Callable[[], float]:
        strategy = "strategy=parameter_server" if ps else "strategy=multi_worker_mirrored"
        prefix = "[chief 0]" if ps else "[worker 0]"

        def side() -> float:
            # `kdist.launch` pins each worker to its own cores unless KDIST_PIN_CORES=0.
            with _environ({PIN_CORES_ENV: "1" if pinned else "0", **(env or {})}):
                return launched()

        def launched() -> float:
            done = launch_cluster(
                workers=workers,
                ps=ps,
                overrides=[] if module else [*job, strategy, *more],
                run_dir=self._dir(f"w{workers}ps{ps}"),
                prefix=prefix,
                **({"module": module} if module else {}),
            )
            return _throughput(done, f"kdist.launch --workers {workers} --ps {ps}")[0]

        return side


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _over_perfect_ms(cluster: float, one: float, workers: int, batch: int) -> float:
    """ms a step of the cluster takes beyond one process's step divided by the workers."""
    return 1000.0 * (batch / cluster - batch / one / workers)


def _clusters(ctx: Context) -> list[Comparison]:
    c = _Clusters(ctx)
    ps_shards = ("strategy.steps_per_schedule=16",)
    sides: dict[str, Callable[[], float]] = {
        ONE: c.one(JOB),
        MWMS2: c.cluster(JOB, workers=2, ps=0),
        MWMS2_BF16: c.cluster(JOB, workers=2, ps=0, more=("trainer.allreduce_dtype=bfloat16",)),
        MWMS2_BF16_PLAIN: c.cluster(
            JOB,
            workers=2,
            ps=0,
            more=("trainer.allreduce_dtype=bfloat16", "trainer.allreduce_error_feedback=false"),
        ),
        MWMS2_UNPINNED: c.cluster(JOB, workers=2, ps=0, pinned=False),
        MWMS2_BF16_PACKS: c.cluster(
            JOB,
            workers=2,
            ps=0,
            more=("trainer.allreduce_dtype=bfloat16", "strategy.bytes_per_pack=1048576"),
        ),
        MWMS4: c.cluster(JOB, workers=4, ps=0),
        PS1: c.cluster(JOB, workers=2, ps=1, more=ps_shards),
        PS2: c.cluster(JOB, workers=2, ps=2, more=(*ps_shards, "strategy.min_shard_bytes=262144")),
        TF_MWMS2: c.cluster(JOB, workers=2, ps=0, module="benchmarks.mwms_loop"),
        TF_MWMS2_UNPINNED: c.cluster(
            JOB, workers=2, ps=0, module="benchmarks.mwms_loop", pinned=False
        ),
        TF_PS1: c.cluster(JOB, workers=2, ps=1, module="benchmarks.ps_loop"),
        REC_ONE: c.one(RECOMMENDER),
        REC_PS2: c.cluster(
            RECOMMENDER,
            workers=2,
            ps=2,
            more=("strategy.steps_per_schedule=16", "strategy.min_shard_bytes=65536"),
        ),
        REC_MWMS2: c.cluster(RECOMMENDER, workers=2, ps=0),
    }
    form = os.environ.get("KDIST_SCALING_FORM")
    if form in ("device", "allreduce"):
        keep = DEVICE_FORM if form == "device" else ALLREDUCE_FORM
        sides = {name: side for name, side in sides.items() if name in keep}
    elif ctx.quick:
        # 2 cores: the runs the 2-core targets and the rule of thumb need.
        for name in (
            MWMS4,
            PS2,
            REC_MWMS2,
            TF_PS1,
            MWMS2_UNPINNED,
            TF_MWMS2_UNPINNED,
            MWMS2_BF16_PACKS,
            MWMS2_BF16_PLAIN,
        ):
            del sides[name]
    rounds = int(os.environ.get("KDIST_SCALING_ROUNDS", "0")) or (
        1 if ctx.quick else ctx.rounds_for(5)
    )
    ctx.log(f"scaling: {len(sides)} local runs a round, {rounds} round(s)")
    before = load_average()
    failures: dict[str, str] = {}
    samples = interleave(
        [Case(n, _tolerant(n, f, failures, ctx)) for n, f in sides.items()], rounds, warmup=0
    )
    load = {"before": before, "after": load_average()}
    one = statistics.median(samples[ONE]) if ONE in samples else 0.0
    rec_one = statistics.median(samples[REC_ONE]) if REC_ONE in samples else 0.0
    workers = {
        MWMS2: 2,
        MWMS2_BF16: 2,
        MWMS2_BF16_PLAIN: 2,
        MWMS2_UNPINNED: 2,
        MWMS2_BF16_PACKS: 2,
        MWMS4: 4,
        PS1: 2,
        PS2: 2,
        TF_MWMS2: 2,
        TF_MWMS2_UNPINNED: 2,
        TF_PS1: 2,
    }
    over: dict[str, float | None] = {}
    for name, n in [*workers.items(), (REC_PS2, 2), (REC_MWMS2, 2)]:
        if name in samples and all(samples[name]):
            base, batch = (rec_one, 256) if name.startswith("recommender") else (one, BATCH)
            rate = statistics.median(samples[name])
            over[name] = round(_over_perfect_ms(rate, base, n, batch), 1) if base else None
    details = {
        "cnn_job": f"MNIST CNN, synthetic 28x28x1, global batch {BATCH}, 16 steps per call, "
        f"{STEPS_PER_EPOCH} steps an epoch",
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "pinning": "kdist.launch pins worker i to the i-th cores // workers CPUs; the 'not "
        "pinned' rows set KDIST_PIN_CORES=0 (threads still cores // workers)",
        "recommender_job": f"wide_deep, {TABLE_ROWS:,} x {TABLE_DIM} deep table (and a "
        f"{TABLE_ROWS:,} x 2 wide one), 8 ids an example, global batch 256, sparse_updates",
        "ms_per_step_over_perfect_scaling": over,
        "timed": "the second epoch of each run (the first traces and connects)",
        "cores": "on 2 cores every task shares them; ../shared/DEVICE.md: the 16-core machine",
        "failed_runs": failures,
    }
    rows = [
        ("scaling/mwms2_vs_one", MWMS2, ONE, None),
        ("scaling/mwms2_pinned_vs_unpinned", MWMS2, MWMS2_UNPINNED, None),
        ("scaling/mwms2_bf16_vs_one", MWMS2_BF16, ONE, None),
        ("scaling/mwms2_bf16_packs_vs_bf16", MWMS2_BF16_PACKS, MWMS2_BF16, None),
        ("scaling/mwms2_bf16_packs_vs_tf_loop", MWMS2_BF16_PACKS, TF_MWMS2, None),
        ("scaling/mwms2_bf16_vs_f32", MWMS2_BF16, MWMS2, Target(">=", 1.0)),
        ("scaling/mwms2_bf16_feedback_vs_plain", MWMS2_BF16, MWMS2_BF16_PLAIN, None),
        ("scaling/mwms2_bf16_plain_vs_f32", MWMS2_BF16_PLAIN, MWMS2, None),
        ("scaling/mwms4_vs_one", MWMS4, ONE, None),
        ("scaling/ps_2w1ps_vs_one", PS1, ONE, None),
        ("scaling/ps_2w2ps_vs_one", PS2, ONE, None),
        ("scaling/mwms2_vs_tf_loop", MWMS2, TF_MWMS2, None),
        ("scaling/mwms2_bf16_vs_tf_loop", MWMS2_BF16, TF_MWMS2, None),
        ("scaling/ps_2w1ps_vs_tf_loop", PS1, TF_PS1, None),
        ("scaling/tf_loop_mwms2_vs_one", TF_MWMS2, ONE, None),
        ("scaling/mwms2_bf16_vs_tf_loop_unpinned", MWMS2_BF16, TF_MWMS2_UNPINNED, None),
        ("scaling/tf_loop_unpinned_mwms2_vs_one", TF_MWMS2_UNPINNED, ONE, None),
        ("scaling/recommender_ps_2w2ps_vs_one", REC_PS2, REC_ONE, None),
        ("scaling/recommender_mwms2_vs_one", REC_MWMS2, REC_ONE, None),
    ]
    return [
        summarize(
            id=id_,
            group=GROUP,
            title=f"{a} / {b} (examples/s)",
            samples=samples,
            a=a,
            b=b,
            unit="examples/s",
            lower_is_better=False,
            target=target,
            load=load,
            details=details,
        )
        for id_, a, b, target in rows
        if a in samples and b in samples and all(samples[b])
    ]


def _tolerant(
    name: str, side: Callable[[], float], failures: dict[str, str], ctx: Context
) -> Callable[[], float]:
    """`side`, returning 0 examples/s (and recording why) instead of raising."""

    def run_side() -> float:
        try:
            rate = side()
            ctx.log(f"scaling: {name}: {rate:.1f} examples/s")
            return rate
        except RuntimeError as error:
            failures[name] = str(error)[-2000:]
            ctx.log(f"scaling: {name} failed: {str(error).splitlines()[0]}")
            return 0.0

    return run_side


def run(ctx: Context) -> list[Comparison]:
    """Parts 1 to 4 (see the module docstring).

    `KDIST_SCALING_PARTS=in_process` (parts 1 and 2) or `clusters` (3 and 4) runs only
    those, e.g. in two processes at once on a busy machine: the in-process rows are
    interleaved within themselves, and bytes and loss curves do not depend on the load.
    """
    parts = os.environ.get("KDIST_SCALING_PARTS", "all")
    rows: list[Comparison] = []
    if parts in ("all", "in_process"):
        rows += [*_sparse_updates(ctx), *_compressed_all_reduce(ctx)]
    if parts in ("all", "clusters"):
        rows += _clusters(ctx)
    return rows
