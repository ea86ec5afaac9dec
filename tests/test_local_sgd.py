"""strategy.sync: local SGD and DiLoCo (replicas train apart, weights averaged every N steps)."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from helpers import LOGICAL, REPO, compose, crash_at_step, run_module, sync_job

import kdist
from kdist.config import ConfigError
from kdist.config.sync import SyncSettings
from kdist.config.validate import validate
from kdist.engine.sync.replica_state import optimizer_slots
from kdist.strategies.compression import reduced_bytes

JOB = [LOGICAL, "strategy=mirrored", *sync_job(steps_per_epoch=12, steps_per_execution=1)]
# Plain SGD (no momentum) and a small MLP, unless a case picks another.
SGD = ["optimizer=sgd", "optimizer.momentum=0.0", "optimizer.learning_rate=0.1"]
MLP = ["model=mlp", "model.units=[32]"]


def _fit(tmp_path: Path, name: str, *more: str) -> kdist.Experiment:
    optimizer = [] if any(m.startswith("optimizer=") for m in more) else SGD
    model = [] if any(m.startswith("model=") for m in more) else MLP
    exp = kdist.Experiment(compose([*JOB, *model, *optimizer, *more]), run_dir=tmp_path / name)
    exp.fit_history = exp.fit()  # type: ignore[attr-defined]
    return exp


def _weights(exp: kdist.Experiment) -> list[np.ndarray]:
    return [np.asarray(w) for w in exp.model.get_weights()]


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def _replica_spread(exp: kdist.Experiment) -> float:
    """Largest difference between two replicas' copies of any trainable weight."""
    spread = 0.0
    for variable in exp.model.trainable_variables:
        copies = [np.asarray(c) for c in variable.value.values]
        assert len(copies) == 2
        spread = max(spread, float(np.max(np.abs(copies[0] - copies[1]))))
    return spread


def _local(mode: str = "local_sgd", every: int = 4, *more: str) -> list[str]:
    return [f"strategy.sync.mode={mode}", f"strategy.sync.sync_every={every}", *more]


# -- correctness ------------------------------------------------------------------------


def test_local_sgd_every_step_with_plain_sgd_equals_every_step(tmp_path: Path):
    reference = _fit(tmp_path, "every_step")
    local = _fit(tmp_path, "local", *_local(every=1))
    assert type(local.runner).__name__ == "LocalSGDRunner"
    assert _max_diff(_weights(reference), _weights(local)) < 1e-5
    # 24 steps, one average after each.
    assert local.runner.averager.count.syncs == 24


def test_replicas_drift_between_averages_and_agree_after_each(tmp_path: Path):
    exp = kdist.Experiment(compose([*JOB, *MLP, *SGD, *_local(every=4)]), run_dir=tmp_path / "r")
    runner_spreads = []
    exp.fit()
    runner = exp.runner
    assert _replica_spread(exp) == 0.0  # averaged at the end of the epoch
    runner.train_loop_begin(reset_metrics=True)
    for _ in range(3):
        runner.train_steps(1)  # steps 25-27: no average yet
        runner_spreads.append(_replica_spread(exp))
    assert min(runner_spreads) > 0.0, runner_spreads
    runner.train_steps(1)  # step 28: a multiple of 4, averaged
    assert _replica_spread(exp) == 0.0


def test_one_all_reduce_per_sync_every_steps_counted_while_tracing(tmp_path: Path):
    # 16-bit all-reduce: its counter records every gradient all-reduce traced. Local steps
    # trace none; each average is one all-reduce of the weights' changes, in bfloat16.
    exp = _fit(tmp_path, "bf16", *_local(every=4), "trainer.allreduce_dtype=bfloat16")
    gradients = reduced_bytes(exp.optimizer)
    assert gradients is not None and gradients.traces == []
    count = exp.runner.averager.count
    weights = sum(int(np.prod(v.shape)) for v in exp.model.trainable_variables)
    assert count.all_reduces == 1 and count.bytes == weights * 2
    steps = 2 * 12
    assert count.syncs * count.all_reduces / steps == pytest.approx(1 / 4)
    every_step = _fit(tmp_path, "bf16_every", "trainer.allreduce_dtype=bfloat16")
    assert reduced_bytes(every_step.optimizer).traces  # the gradients' all-reduce
    assert abs(_fit_accuracy(exp) - _fit_accuracy(every_step)) < 0.25


def _fit_accuracy(exp: kdist.Experiment) -> float:
    return float(exp.fit_history.history["val_accuracy"][-1])


def test_warmup_steps_are_every_step_updates(tmp_path: Path):
    # With Adam, local steps would differ from every_step at once (per-replica moments):
    # 24 warm-up steps out of 24 must give every_step's weights.
    adam = ["optimizer=adam", "optimizer.learning_rate=0.01"]
    reference = _fit(tmp_path, "every_step", *adam)
    warm = _fit(tmp_path, "warm", *adam, *_local(every=4), "strategy.sync.warmup_steps=24")
    local = _fit(tmp_path, "local", *adam, *_local(every=4))
    assert _max_diff(_weights(reference), _weights(warm)) < 1e-5
    assert _max_diff(_weights(reference), _weights(local)) > 1e-4


def test_diloco_after_a_warm_up_starts_its_outer_steps_from_the_warm_up(tmp_path: Path):
    # 12 synchronous steps (one epoch), then 3 local steps and an average by hand: with
    # no momentum, DiLoCo's outer step gives w12 + lr * (mean(w15) - w12), where w12 are
    # the warm-up's weights (not the weights the run started with).
    lr = 0.5
    outer = [f"strategy.sync.outer_learning_rate={lr}", "strategy.sync.outer_momentum=0.0"]
    exp = _fit(
        tmp_path, "diloco", *_local("diloco", 8), "strategy.sync.warmup_steps=12", *outer,
        "trainer.epochs=1",
    )  # fmt: skip
    w12 = [np.asarray(v) for v in exp.model.trainable_variables]
    runner = exp.runner
    runner.train_loop_begin(reset_metrics=True)
    runner.train_steps(3)
    assert _replica_spread(exp) > 0
    mean15 = [
        np.mean([np.asarray(c) for c in v.value.values], axis=0)
        for v in exp.model.trainable_variables
    ]
    runner.average()
    expected = [a + lr * (m - a) for a, m in zip(w12, mean15, strict=True)]
    after = [np.asarray(v) for v in exp.model.trainable_variables]
    assert _max_diff(after, expected) < 1e-6


def test_an_average_falls_on_the_same_steps_whatever_steps_per_execution(tmp_path: Path):
    one = _fit(tmp_path, "one", *_local(every=4))
    five = _fit(tmp_path, "five", *_local(every=4), "trainer.steps_per_execution=5")
    assert _max_diff(_weights(one), _weights(five)) < 1e-6
    assert one.runner.averager.count.syncs == five.runner.averager.count.syncs == 6


def test_local_sgd_composes_with_accumulation(tmp_path: Path):
    more = ["trainer.accumulate_steps=2"]
    reference = _fit(tmp_path, "every_step", *more)
    local = _fit(tmp_path, "local", *more, *_local(every=1))
    assert _max_diff(_weights(reference), _weights(local)) < 1e-5


def test_local_sgd_runs_a_models_own_train_step(tmp_path: Path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "tests"))
    own = [
        "model=custom",
        "model._target_=conformance_models.own_train_step",
        "data.source.input_shape=[8]",
        "data.source.num_classes=3",
    ]
    reference = _fit(tmp_path, "every_step", *own)
    local = _fit(tmp_path, "local", *own, *_local(every=1))
    assert _max_diff(_weights(reference), _weights(local)) < 1e-5
    drifting = _fit(tmp_path, "drift", *own, *_local(every=4))
    assert _replica_spread(drifting) == 0.0
    assert "grad_norm" in drifting.fit_history.history


def test_diloco_trains_and_keeps_the_replicas_together(tmp_path: Path):
    exp = _fit(tmp_path, "diloco", *_local("diloco", 4), "optimizer=adam")
    assert _replica_spread(exp) == 0.0
    averager = exp.runner.averager
    assert any(float(np.max(np.abs(m.numpy()))) > 0 for m in averager.momentum)
    losses = exp.fit_history.history["loss"]
    assert losses[-1] < losses[0], losses
    # The outer step: anchor = the weights (the last average's result).
    anchors = [a.numpy() for a in averager.anchors]
    assert _max_diff(anchors, [np.asarray(v) for v in exp.model.trainable_variables]) == 0.0


def test_each_replicas_optimizer_state_is_gathered_for_a_save_and_spread_back(tmp_path: Path):
    exp = _fit(tmp_path, "adam", *_local(every=4), "optimizer=adam", "optimizer.learning_rate=0.01")
    runner, optimizer = exp.runner, exp.optimizer
    runner.train_loop_begin(reset_metrics=True)
    runner.train_steps(2)  # between averages: each replica's moments are its own
    slots = [v for v in optimizer.variables if len(v.shape) == 2]
    before = [[np.asarray(c) for c in v.value.values] for v in slots]
    assert max(float(np.max(np.abs(a - b))) for a, b in before) > 0
    syncs = runner.averager.count.syncs
    runner.settle()  # what a save does first: gather, with no average
    assert runner.averager.count.syncs == syncs
    assert _replica_spread(exp) > 0
    gathered = [[np.asarray(c) for c in v.value.values] for v in slots]
    # The banks hold every replica's row once, in host memory: not a copy a replica.
    banks = runner.averager.replica_states.banks
    assert len(banks) == len(optimizer_slots(optimizer))
    for bank in banks:
        assert not isinstance(bank, tf.distribute.DistributedValues)
        assert tf.DeviceSpec.from_string(bank.device).device_type == "CPU"
        assert bank.shape[0] == 2
    for bank, copies in zip([b for b in banks if len(b.shape) == 3], gathered, strict=True):
        for replica, copy in enumerate(copies):
            np.testing.assert_array_equal(np.asarray(bank[replica]), copy)
    for slot in slots:
        slot.assign(np.zeros(slot.shape, "float32"))  # as a restore of the first copy would
    assert runner.averager.replica_states.spread()
    after = [[np.asarray(c) for c in v.value.values] for v in slots]
    for kept, back in zip(gathered, after, strict=True):
        for replica_kept, replica_back in zip(kept, back, strict=True):
            np.testing.assert_array_equal(replica_kept, replica_back)
    runner.train_steps(1)  # a later step: the banks are not of this step any more
    assert not runner.averager.replica_states.spread()


def test_saving_between_averages_moves_no_average(tmp_path: Path):
    # Backups every 3 steps, averages every 4 (12 steps an epoch): the averages fall at
    # 4, 8, 12 of each epoch as without backups (a save that averaged would add 3, 6, 9),
    # and the run's weights are those of the run that never saved.
    saving = ["callbacks.backup.enabled=true", "callbacks.backup.every_n_steps=3"]
    local = [*_local("diloco", 4), "optimizer=adam", "optimizer.learning_rate=0.01"]
    quiet = _fit(tmp_path, "quiet", *local)
    saved = _fit(tmp_path, "saved", *local, *saving)
    assert quiet.runner.averager.count.syncs == saved.runner.averager.count.syncs == 6
    assert _max_diff(_weights(quiet), _weights(saved)) == 0.0
    # The save of step 9 (between two averages) holds each replica's own weights.
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(tmp_path / "saved" / "backup" / "ckpt-21"))
    names = reader.get_variable_to_shape_map()
    at = [k for k in names if k.endswith("replica_weights/gathered_at/.ATTRIBUTES/VARIABLE_VALUE")]
    assert [int(reader.get_tensor(k)) for k in at] == [21]


def test_a_crash_between_averages_resumes_each_replicas_own_weights_exactly(tmp_path: Path):
    # Backups every 5 steps, averages every 4: the backup of step 5 (or 10) is between two
    # averages. The resumed run gives each replica its own weights and Adam moments back
    # (they differ when training begins) and ends with the uninterrupted run's weights.
    job = [
        *_local("diloco", 4),
        "optimizer=adam",
        "optimizer.learning_rate=0.01",
        "callbacks.backup.enabled=true",
        "callbacks.backup.every_n_steps=5",
    ]
    whole = _fit(tmp_path, "whole", *job)
    run = tmp_path / "run"
    config = compose([*JOB, *MLP, *job])
    crash_at_step(kdist.Experiment(config, run_dir=run), 7)
    resumed = kdist.Experiment(config, run_dir=run)
    spread: list[float] = []
    import keras

    class AtBegin(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            spread.append(_replica_spread(resumed))

    resumed.fit(callbacks=[AtBegin()])
    assert int(resumed.optimizer.iterations.numpy()) == 24
    assert spread[0] > 0  # each replica's own weights, not the first replica's
    assert _replica_spread(resumed) == 0.0  # the last average
    assert _max_diff(_weights(whole), _weights(resumed)) == 0.0


@pytest.mark.slow
def test_a_save_between_averages_resumed_under_every_step_takes_the_replicas_mean(
    tmp_path: Path,
):
    run = tmp_path / "run"
    saves = ["callbacks.backup.enabled=true", "callbacks.backup.every_n_steps=5"]
    local = kdist.Experiment(
        compose([*JOB, *MLP, *SGD, *saves, *_local("local_sgd", 4)]), run_dir=run
    )
    crash_at_step(local, 7)
    import tensorflow as tf

    path = tf.train.latest_checkpoint(str(run / "backup"))
    assert path is not None and path.endswith("ckpt-5")
    reader = tf.train.load_checkpoint(path)
    names = reader.get_variable_to_shape_map()
    banks = sorted(
        (k for k in names if "replica_weights/banks/" in k),
        key=lambda k: int(k.split("banks/")[1].split("/")[0]),
    )
    means = [reader.get_tensor(k).mean(axis=0) for k in banks]
    assert max(float(np.max(np.abs(b[0] - b[1]))) for b in map(reader.get_tensor, banks)) > 0
    resumed = kdist.Experiment(compose([*JOB, *MLP, *SGD, *saves]), run_dir=run)
    seen: list[list[np.ndarray]] = []
    import keras

    class AtBegin(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen.append([np.asarray(v) for v in resumed.model.trainable_variables])

    resumed.fit(callbacks=[AtBegin()])
    assert _max_diff(seen[0], means) == 0.0


def _replica_copies(variable) -> list[np.ndarray]:
    copies = [np.asarray(c) for c in variable.value.values]
    assert len(copies) == 2
    return copies


def test_batch_norm_statistics_are_averaged_with_the_weights(tmp_path: Path):
    # Each replica updates BatchNormalization's moving mean and variance from its own
    # batches; an average replaces them by their mean, so every replica (and a save)
    # holds the same statistics.
    bn = ["model=resnet", "data.source.input_shape=[8,8,3]"]
    exp = kdist.Experiment(compose([*JOB, *bn, *SGD, *_local(every=4)]), run_dir=tmp_path / "bn")
    exp.fit()
    runner = exp.runner
    statistics = [v for v in exp.model.non_trainable_variables if "moving_" in v.path]
    assert statistics
    assert len(runner.averager._statistics) == len(statistics)
    runner.train_loop_begin(reset_metrics=True)
    runner.train_steps(3)  # steps 25-27: apart
    before = [_replica_copies(v) for v in statistics]
    assert max(float(np.max(np.abs(a - b))) for a, b in before) > 0
    runner.train_steps(1)  # step 28: its own update, then the average
    after = [_replica_copies(v) for v in statistics]
    for a, b in after:
        np.testing.assert_array_equal(a, b)
    # One all-reduce an average still (the statistics travel with the weights' changes).
    assert runner.averager.count.all_reduces == 1


def test_a_gans_own_optimizers_keep_each_replicas_state_for_a_save(tmp_path: Path):
    from conformance_models import FEATURES, gan

    cfg = compose(
        [
            *JOB,
            f"data.source.input_shape=[{FEATURES}]",
            "data.source.num_classes=3",
            "trainer.validation=false",  # keras.io's GAN has no `test_step`
            *_local(every=4),
        ]
    )
    exp = kdist.Experiment(cfg, run_dir=tmp_path / "gan")
    with exp.strategy.scope():
        model = gan()
    exp.build_model(model)
    exp.fit()
    runner = exp.runner
    optimizers = [model.d_optimizer, model.g_optimizer]
    kept = runner.replica_states[1:]
    assert [states._optimizer for states in kept] == optimizers
    runner.train_loop_begin(reset_metrics=True)
    runner.train_steps(2)  # between averages: each replica's moments are its own
    slots = [v for o in optimizers for v in o.variables if len(v.shape) == 2]
    assert max(float(np.max(np.abs(a - b))) for a, b in map(_replica_copies, slots)) > 0
    runner.settle()  # what a save does first: average, then gather every optimizer's
    gathered = [_replica_copies(v) for v in slots]
    for slot in slots:
        slot.assign(np.zeros(slot.shape, "float32"))  # as a restore of the first copy would
    runner.set_train_dataset_fn(runner.train_dataset_fn)  # what a restore does: spread back
    for before, back in zip(gathered, map(_replica_copies, slots), strict=True):
        for replica_before, replica_back in zip(before, back, strict=True):
            np.testing.assert_array_equal(replica_before, replica_back)


# Backups (`callbacks=minimal` saves none; a notebook resumes from its backups).
SAVES = ["callbacks.backup.enabled=true", "callbacks.backup.every_n_steps=6"]


class _AtTrainBegin:
    """Records what the runner's averager holds when training begins (after a restore)."""

    def __init__(self, exp: kdist.Experiment):
        import keras

        seen: dict[str, float] = {}
        self.seen = seen

        class Recorder(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                averager = exp.runner.averager
                weights = [np.asarray(v) for v in exp.model.trainable_variables]
                anchors = [a.numpy() for a in averager.anchors]
                seen["anchor_vs_weights"] = _max_diff(anchors, weights)
                seen["momentum"] = max(
                    (float(np.max(np.abs(m.numpy()))) for m in averager.momentum), default=0.0
                )

        self.callback = Recorder()


@pytest.mark.parametrize(("first", "then"), [("every_step", "diloco"), ("local_sgd", "diloco")])
def test_a_resume_into_another_sync_mode_averages_anew_from_the_restored_weights(
    tmp_path: Path, first: str, then: str
):
    # `strategy.*` may change on resume. A checkpoint without this mode's state of its
    # step (every_step's has no anchor; local_sgd's no outer momentum): the averages
    # start from the restored weights with no momentum, not from the anchors the runner
    # was built with (DiLoCo's first outer step would jump back towards them).
    run = tmp_path / "run"
    mode = [] if first == "every_step" else _local(first, 4)
    job = [*JOB, *MLP, "optimizer=adam", *SAVES]
    kdist.Experiment(compose([*job, "trainer.epochs=1", *mode]), run_dir=run).fit()
    resumed = kdist.Experiment(compose([*job, *_local(then, 4)]), run_dir=run)
    recorder = _AtTrainBegin(resumed)
    history = resumed.fit(callbacks=[recorder.callback])
    assert recorder.seen == {"anchor_vs_weights": 0.0, "momentum": 0.0}
    assert history.epoch == [1]
    assert _replica_spread(resumed) == 0.0
    assert np.isfinite(history.history["loss"]).all()


def test_a_resume_from_diloco_into_every_step_trains_on_from_the_averaged_weights(
    tmp_path: Path,
):
    run = tmp_path / "run"
    job = [*JOB, *MLP, "optimizer=adam", *SAVES]
    first = kdist.Experiment(compose([*job, "trainer.epochs=1", *_local("diloco", 4)]), run_dir=run)
    first.fit()
    averaged = _weights(first)
    resumed = kdist.Experiment(compose(job), run_dir=run)
    seen: list[list[np.ndarray]] = []

    import keras

    class AtBegin(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen.append(_weights(resumed))

    history = resumed.fit(callbacks=[AtBegin()])
    assert history.epoch == [1]
    assert _max_diff(seen[0], averaged) == 0.0
    assert np.isfinite(history.history["loss"]).all()


def test_a_resume_of_its_own_mode_keeps_the_anchor_and_the_momentum(tmp_path: Path):
    run = tmp_path / "run"
    job = [*JOB, *MLP, "optimizer=adam", *SAVES, *_local("diloco", 4)]
    first = kdist.Experiment(compose([*job, "trainer.epochs=1"]), run_dir=run)
    first.fit()
    momentum = [m.numpy() for m in first.runner.averager.momentum]
    assert max(float(np.max(np.abs(m))) for m in momentum) > 0
    resumed = kdist.Experiment(compose(job), run_dir=run)
    recorder = _AtTrainBegin(resumed)
    resumed.fit(callbacks=[recorder.callback])
    assert recorder.seen["anchor_vs_weights"] == 0.0  # a save is an average
    assert recorder.seen["momentum"] == pytest.approx(
        max(float(np.max(np.abs(m))) for m in momentum)
    )


def test_a_later_fit_of_the_same_model_carries_on_its_averager_and_residuals(tmp_path: Path):
    # A notebook's next `fit` on new data makes a new runner. It trains with the first
    # runner's averager (DiLoCo's anchor and momentum) and all-reduce residuals, which
    # the checkpoint goes on holding; a recompile (a new optimizer) starts new ones.
    from kdist.engine.checkpoint.parts import AVERAGER, RESIDUALS

    more = [*_local("diloco", 4), "trainer.allreduce_dtype=bfloat16"]
    exp = kdist.Experiment(compose([*JOB, *MLP, *SGD, *more]), run_dir=tmp_path / "run")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(128, 16)).astype("float32"), rng.integers(0, 4, size=128)
    exp.fit(x, y, batch_size=32, epochs=1)
    first = exp.runner
    averager, residuals = first.averager, first.error_feedback
    assert averager is not None and residuals is not None
    syncs = averager.count.syncs
    exp.fit(x[:64], y[:64], batch_size=32, epochs=2)
    assert exp.runner is not first
    assert exp.runner.averager is averager and exp.runner.error_feedback is residuals
    assert averager.count.syncs > syncs
    parts = {part.node: part.value for part in exp.controller.parts}
    assert parts[AVERAGER] is averager and parts[RESIDUALS] is residuals
    with exp.strategy.scope():
        exp.model.compile(
            optimizer=tf.keras.optimizers.SGD(0.1),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
    exp.fit(x, y, batch_size=32, epochs=1)
    assert exp.runner.averager is not averager and exp.runner.error_feedback is not residuals
    parts = {part.node: part.value for part in exp.controller.parts}
    assert parts[AVERAGER] is exp.runner.averager


# -- refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["strategy=one_device", "strategy.sync.mode=local_sgd"], "strategy.sync.mode"),
        (["strategy=parameter_server", "strategy.sync.mode=diloco"], "strategy.sync.mode"),
        (["strategy=mirrored", "strategy.sync.mode=local_sgd", "strategy.sync.sync_every=0"],
         "strategy.sync.sync_every"),
        (["strategy=mirrored", "strategy.sync.mode=diloco", "strategy.sync.sync_every=-3"],
         "strategy.sync.sync_every"),
        (["strategy=multi_worker_mirrored", "strategy.sync.mode=sometimes"], "strategy.sync.mode"),
        (["strategy=mirrored", "strategy.sync.mode=diloco", "strategy.sync.outer_momentum=1.0"],
         "strategy.sync.outer_momentum"),
        (["strategy=mirrored", "strategy.sync.mode=diloco",
          "strategy.sync.outer_learning_rate=0"], "strategy.sync.outer_learning_rate"),
        (["strategy=mirrored", "strategy.sync.warmup_steps=-1"], "strategy.sync.warmup_steps"),
        (["strategy=mirrored", "strategy.sync.mode=diloco", "strategy.sync.sync_every=4",
          "strategy.sync.overlap_steps=4"], "strategy.sync.overlap_steps"),
        (["strategy=mirrored", "strategy.sync.overlap_steps=-1"], "strategy.sync.overlap_steps"),
    ],
)  # fmt: skip
def test_bad_sync_settings_are_refused_in_one_line_before_tensorflow(overrides, key):
    with pytest.raises(ConfigError) as caught:
        validate(compose(overrides))
    message = str(caught.value)
    assert message.startswith(key) and "\n" not in message


def test_a_sync_every_that_is_not_an_integer_is_refused():
    with pytest.raises(Exception) as caught:
        compose(["strategy=mirrored", "strategy.sync.sync_every=1.5"])
    assert "sync_every" in str(caught.value)
    with pytest.raises(ConfigError, match=r"^strategy.sync.sync_every"):
        SyncSettings(mode="local_sgd", sync_every=True)  # type: ignore[arg-type]


def test_every_step_is_the_default_and_accepted_everywhere():
    for strategy in ("one_device", "parameter_server", "auto", "mirrored"):
        cfg = compose([f"strategy={strategy}"])
        assert cfg.strategy.sync.mode == "every_step"
        validate(cfg)


def test_auto_with_one_device_refuses_a_local_mode(tmp_path: Path):
    cfg = compose([*JOB, *MLP, *SGD, "strategy=auto", "runtime.logical_devices=null", *_local()])
    with pytest.raises(ConfigError, match=r"^strategy.sync.mode='local_sgd': .*OneDevice"):
        kdist.Experiment(cfg, run_dir=tmp_path / "auto").fit()


# -- checkpoints and clusters (subprocesses) ---------------------------------------------

RESUME = [
    *JOB,
    *MLP,
    "optimizer=adam",  # each replica's own moments, kept across the kill
    "optimizer.learning_rate=0.01",
    "trainer.epochs=3",
    "runtime.deterministic=true",
    "callbacks=default",
    "callbacks.tensorboard.enabled=false",
    "callbacks.backup.every_n_steps=5",
    "callbacks.backup.keep=3",
    "strategy.sync.mode=diloco",
    "strategy.sync.sync_every=4",
    "hydra.run.dir=run",
]


@pytest.mark.slow
@pytest.mark.parametrize(("overlap", "kill", "saved"), [(0, 19, "10|15"), (3, 14, "5|10")])
def test_sigkill_between_averages_resumes_from_the_last_save_exactly(
    tmp_path: Path, overlap: int, kill: int, saved: str
):
    """Backups every 5 steps, averages every 4 (a save averages nothing): a kill at step
    19 resumes from the backup of step 15 (or 10), which holds the anchor and outer
    momentum of the average of step 12 (or 8) and each replica's own weights and Adam
    moments, and ends with the uninterrupted run's weights. With `overlap_steps=3` (sent
    at 8, applied at 11) a kill at 14 resumes from the backup of step 10 (or 5), saved
    with an average in flight."""
    import keras

    env = {"PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "tests")))}
    job = [*RESUME, f"strategy.sync.overlap_steps={overlap}"]
    (tmp_path / "ref").mkdir()
    reference = run_module("kdist.train", job, cwd=tmp_path / "ref", env=env)
    assert reference.returncode == 0, reference.stderr[-2000:]
    work = tmp_path / "work"
    work.mkdir()
    killed = run_module(
        "kdist.train",
        [*job, f"callbacks.extra=[{{_target_: helpers.KillAtStep, step: {kill}}}]"],
        cwd=work,
        env=env,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = run_module("kdist.train", job, cwd=work, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # The newest complete backup, or the one before when its asynchronous write was cut
    # by the kill (one save in flight at most).
    text = resumed.stdout + resumed.stderr
    assert re.search(rf"continuing at step ({saved}) ", text), text[-2000:]
    metrics = json.loads((work / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 36
    final = keras.models.load_model(work / "run" / "model.keras").get_weights()
    expected = keras.models.load_model(tmp_path / "ref" / "run" / "model.keras").get_weights()
    assert _max_diff(final, expected) < 1e-6


CLUSTER = [
    "model=cnn",
    "model.dense_units=64",
    "data.shuffle=false",
    "trainer.epochs=2",
    "trainer.steps_per_epoch=6",
    "trainer.global_batch_size=32",
    "trainer.steps_per_execution=3",
    "runtime.seed=7",
    "trainer.verbose=2",
    "callbacks.tensorboard.enabled=false",
]


def _cluster_run(tmp_path: Path, name: str, *more: str) -> tuple[str, Path]:
    from kdist.launch import run

    log = io.StringIO()
    run_dir = tmp_path / name
    code = run(
        2,
        ["strategy=multi_worker_mirrored", *CLUSTER, *more],
        run_dir=run_dir,
        timeout=300,
        output=log,
    )
    text = log.getvalue()
    assert code == 0, text[-3000:]
    return text, run_dir


@pytest.mark.slow
@pytest.mark.multiworker
def test_two_workers_local_sgd_every_step_equals_one_device_and_diloco_agrees(tmp_path: Path):
    import keras

    sgd = ["optimizer=sgd", "optimizer.momentum=0.0", "optimizer.learning_rate=0.05"]
    _, run_dir = _cluster_run(tmp_path, "local", *sgd, *_local(every=1))
    two = keras.models.load_model(run_dir / "model.keras").get_weights()
    exp = kdist.Experiment(
        compose(["strategy=one_device", *CLUSTER, *sgd, "trainer.verbose=0"]),
        run_dir=tmp_path / "one",
    )
    exp.fit()
    assert _max_diff(_weights(exp), two) < 1e-5
    text, run_dir = _cluster_run(tmp_path, "diloco", *_local("diloco", 4), "optimizer=adam")
    # Validation runs on the averaged weights: both workers measure the same model.
    finals = re.findall(r"\[(worker \d)\] .*validation: (loss [\d.]+, accuracy [\d.]+)", text)
    assert {w for w, _ in finals} == {"worker 0", "worker 1"}
    assert len({m for _, m in finals}) == 1, finals
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["num_replicas"] == 2 and metrics["steps"] == 12
