"""The kdist engine: step counts, Keras callback hooks, validation timing, stopping."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers import compose, make_recorder

import kdist


@pytest.mark.parametrize(
    ("strategy", "steps_per_epoch", "steps_per_execution", "epochs"),
    [("one_device", 5, 2, 3), ("mirrored", 7, 3, 2), ("one_device", 4, 8, 2)],
)
def test_optimizer_iterations_equal_planned_steps(
    strategy, steps_per_epoch, steps_per_execution, epochs, tmp_path: Path
):
    cfg = compose(
        [
            f"strategy={strategy}",
            f"trainer.steps_per_epoch={steps_per_epoch}",
            f"trainer.steps_per_execution={steps_per_execution}",
            f"trainer.epochs={epochs}",
            "trainer.verbose=0",
            f"run_dir={tmp_path}",
        ]
    )
    exp = kdist.Experiment(cfg)
    recorder = make_recorder()
    exp.fit(callbacks=[recorder])
    assert int(exp.optimizer.iterations.numpy()) == steps_per_epoch * epochs
    calls_per_epoch = math.ceil(steps_per_epoch / steps_per_execution)
    assert recorder.count("batch_end") == calls_per_epoch * epochs
    # Keras's `EpochIterator`: a call's batch-end index is `begin + steps_per_execution - 1`,
    # past the epoch's last step for a partial last call.
    batch_ends = [i for name, i in recorder.calls if name == "batch_end"]
    assert batch_ends[:calls_per_epoch] == [
        begin + steps_per_execution - 1 for begin in range(0, steps_per_epoch, steps_per_execution)
    ]
    assert exp.metrics()["steps"] == steps_per_epoch * epochs


def test_callback_hooks_are_called_in_keras_order(tiny, tmp_path: Path):
    cfg = compose([*tiny, "trainer.epochs=2", "trainer.steps_per_epoch=3"])
    exp = kdist.Experiment(cfg)
    recorder = make_recorder()
    history = exp.fit(callbacks=[recorder])
    names = [name for name, _ in recorder.calls]
    assert names[0] == "train_begin" and names[-1] == "train_end"
    assert recorder.count("epoch_begin") == recorder.count("epoch_end") == 2
    assert recorder.count("test_begin") == recorder.count("test_end") == 2
    assert recorder.count("batch_begin") == recorder.count("batch_end") == 6
    # Validation happens inside the epoch, before its end hook.
    first_end = names.index("epoch_end")
    assert names.index("test_end") < first_end
    assert set(recorder.epoch_logs[0]) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert history.history["val_accuracy"] == [log["val_accuracy"] for log in recorder.epoch_logs]
    assert isinstance(history, __import__("keras").callbacks.History)


def test_no_test_hooks_without_validation_data(tiny):
    # As Keras's `fit` without validation data: no `on_test_*` calls, no `val_` logs.
    cfg = compose([*tiny, "trainer.epochs=2", "trainer.validation=false"])
    exp = kdist.Experiment(cfg)
    recorder = make_recorder()
    exp.fit(callbacks=[recorder])
    assert recorder.count("epoch_end") == 2
    assert recorder.count("test_begin") == recorder.count("test_end") == 0
    assert all(not any(k.startswith("val_") for k in logs) for logs in recorder.epoch_logs)


def test_validation_freq_and_final_validation(tiny):
    cfg = compose([*tiny, "trainer.epochs=3", "trainer.validation_freq=2"])
    exp = kdist.Experiment(cfg)
    recorder = make_recorder()
    exp.fit(callbacks=[recorder])
    with_val = ["val_loss" in logs for logs in recorder.epoch_logs]
    assert with_val == [False, True, True]  # every 2nd epoch, and always after the last


def test_configured_extra_callback_stops_training(tiny):
    cfg = compose(
        [
            *tiny,
            "trainer.epochs=5",
            "callbacks.extra=[{_target_: helpers.StopAfterEpoch, epoch: 1}]",
        ]
    )
    exp = kdist.Experiment(cfg)
    history = exp.fit()
    assert len(history.history["loss"]) == 2
    assert exp.metrics()["epochs"] == 2
    assert int(exp.optimizer.iterations.numpy()) == 2 * exp.steps_per_epoch


def test_early_stopping_from_config(tiny):
    cfg = compose(
        [
            *tiny,
            "trainer.epochs=6",
            "optimizer.learning_rate=1e-9",
            "callbacks.early_stopping.enabled=true",
            "callbacks.early_stopping.monitor=val_accuracy",
            "callbacks.early_stopping.patience=1",
        ]
    )
    history = kdist.Experiment(cfg).fit()
    assert len(history.history["loss"]) < 6


def test_evaluate_matches_numpy_accuracy(tiny):
    cfg = compose([*tiny, "trainer.epochs=1"])
    exp = kdist.Experiment(cfg)
    exp.fit()
    x, y = exp.source.arrays("validation")
    logits = exp.model.predict(x, verbose=0)
    expected = float(np.mean(np.argmax(logits, axis=1) == y))
    assert exp.evaluate()["accuracy"] == pytest.approx(expected, abs=1e-6)


def test_evaluate_covers_every_validation_example_under_mirrored(tiny):
    # 359 validation examples with per-replica batches of 16: the last step is partial.
    cfg = compose([*tiny, "strategy=mirrored", "trainer.epochs=1"])
    exp = kdist.Experiment(cfg)
    exp.fit()
    x, y = exp.source.arrays("validation")
    logits = exp.model.predict(x, verbose=0)
    expected = float(np.mean(np.argmax(logits, axis=1) == y))
    assert exp.evaluate()["accuracy"] == pytest.approx(expected, abs=1e-6)


def test_mixed_float16_wraps_the_optimizer_and_trains(tiny):
    import keras

    cfg = compose([*tiny, "runtime.mixed_precision=mixed_float16", "trainer.epochs=1"])
    try:
        exp = kdist.Experiment(cfg)
        exp.fit()
        assert isinstance(exp.optimizer, keras.optimizers.LossScaleOptimizer)
        assert np.isfinite(exp.metrics()["train"]["loss"])
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_jit_compiled_step_trains(tiny):
    cfg = compose([*tiny, "runtime.jit_compile=true", "trainer.epochs=1"])
    exp = kdist.Experiment(cfg)
    exp.fit()
    assert int(exp.optimizer.iterations.numpy()) == 5
