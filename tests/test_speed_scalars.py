"""TensorBoard while training: steps/s, examples/s and the learning rate, every N steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import tensorflow as tf
from helpers import compose

import kdist
from kdist.config import ConfigError


def _scalars(folder: Path) -> dict[str, list[int]]:
    steps: dict[str, list[int]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                steps.setdefault(value.tag, []).append(int(event.step))
    return steps


def test_speed_scalars_every_n_steps_and_per_epoch(tmp_path: Path):
    exp = kdist.Experiment(
        compose(
            [
                "trainer.epochs=2",
                "trainer.steps_per_epoch=12",
                "trainer.steps_per_execution=2",
                "trainer.verbose=0",
                "callbacks.tensorboard.update_freq=4",
                "callbacks.checkpoint.enabled=false",
                "callbacks.backup.enabled=false",
                "callbacks.curves=false",
            ]
        ),
        run_dir=tmp_path,
    )
    exp.fit()
    found = _scalars(tmp_path / "tensorboard" / "train")
    for tag in ("steps_per_second", "examples_per_second", "learning_rate"):
        # Every 4 steps (calls of 2 steps), the epoch ends (12, 24) included once.
        assert found[tag] == [4, 8, 12, 16, 20, 24], (tag, found[tag])


def test_update_freq_must_be_epoch_batch_or_steps(tmp_path: Path):
    from kdist.config.validate import validate

    with pytest.raises(ConfigError, match=r"update_freq='often'.*or a number of steps"):
        validate(compose(["callbacks.tensorboard.update_freq=often"]))
    validate(compose(["callbacks.tensorboard.update_freq=100"]))


def test_speed_scalars_under_mirrored(tmp_path: Path):
    exp = kdist.Experiment(
        compose(
            [
                "strategy=mirrored",
                "trainer.epochs=1",
                "trainer.steps_per_epoch=4",
                "trainer.verbose=0",
                "callbacks.checkpoint.enabled=false",
                "callbacks.backup.enabled=false",
                "callbacks.curves=false",
            ]
        ),
        run_dir=tmp_path,
    )
    exp.fit()
    assert _scalars(tmp_path / "tensorboard" / "train")["learning_rate"] == [4]


def test_epoch_scalars_read_back_as_tensorboard_scalars(tmp_path: Path):
    # kdist writes an epoch's scalars as one event (`write_scalars`); TensorBoard's own
    # reader must see the values `fit` logged, as scalars, train and validation apart.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    exp = kdist.Experiment(
        compose(
            [
                "trainer.epochs=2",
                "trainer.steps_per_epoch=6",
                "trainer.verbose=0",
                "callbacks.checkpoint.enabled=false",
                "callbacks.backup.enabled=false",
                "callbacks.curves=false",
            ]
        ),
        run_dir=tmp_path,
    )
    history = exp.fit().history
    for split, prefix in (("train", ""), ("validation", "val_")):
        events = EventAccumulator(str(tmp_path / "tensorboard" / split))
        events.Reload()
        for name in ("loss", "accuracy"):
            tensors = events.Tensors(f"epoch_{name}")
            assert [t.step for t in tensors] == [0, 1]
            values = [float(tf.make_ndarray(t.tensor_proto)) for t in tensors]
            assert values == pytest.approx(history[prefix + name], rel=1e-6)
            metadata = events.SummaryMetadata(f"epoch_{name}")
            assert metadata.plugin_data.plugin_name == "scalars"


def test_learning_rate_reads_a_variable_a_schedule_and_a_loss_scale_optimizer():
    import keras

    from kdist.callbacks.tensorboard import learning_rate

    plain = keras.optimizers.SGD(learning_rate=0.25)
    assert learning_rate(plain) == 0.25
    plain.learning_rate.assign(0.125)  # as ReduceLROnPlateau does
    assert learning_rate(plain) == 0.125
    schedule = keras.optimizers.schedules.ExponentialDecay(1.0, decay_steps=1, decay_rate=0.5)
    decayed = keras.optimizers.SGD(learning_rate=schedule)
    decayed.iterations.assign(3)
    assert learning_rate(decayed) == pytest.approx(0.125)
    scaled = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=0.5))
    assert learning_rate(scaled) == 0.5
