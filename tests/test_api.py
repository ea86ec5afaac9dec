"""The Python API as a notebook uses it."""

from __future__ import annotations

from pathlib import Path

import keras
import pytest
from helpers import compose

import kdist


def test_notebook_flow(tmp_path: Path):
    cfg = compose(["model=cnn", "strategy=mirrored", "trainer=fast_dev", "trainer.verbose=0"])
    exp = kdist.Experiment(cfg, run_dir=tmp_path)
    assert exp.strategy.num_replicas_in_sync == 2
    model = exp.build_model()
    # Built inside the strategy scope: its variables are mirrored.
    assert type(model.trainable_variables[0].value).__name__ == "MirroredVariable"
    history = exp.fit()
    assert isinstance(history, keras.callbacks.History)
    assert len(history.history["loss"]) == 2
    metrics = exp.evaluate()
    assert set(metrics) == {"loss", "accuracy"}
    assert (tmp_path / "metrics.json").is_file()
    assert (tmp_path / "config.yaml").is_file()  # outside Hydra, the config is kept too


def test_experiment_twice_in_one_process(tmp_path: Path):
    for i in range(2):
        cfg = compose(["strategy=mirrored", "trainer=fast_dev", "trainer.verbose=0"])
        exp = kdist.Experiment(cfg, run_dir=tmp_path / str(i))
        exp.fit()
        assert int(exp.optimizer.iterations.numpy()) == 10


def test_fit_builds_the_model_when_needed(tmp_path: Path):
    cfg = compose(["trainer=fast_dev", "trainer.verbose=0", "callbacks=minimal"])
    exp = kdist.Experiment(cfg, run_dir=tmp_path)
    exp.fit()
    assert exp.model is not None
    assert not (tmp_path / "model.keras").exists()  # callbacks=minimal saves no model
    assert not (tmp_path / "tensorboard").exists()


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_model_factory_on_its_own(name):
    model = kdist.models.build(name, input_shape=(28, 28, 1), num_classes=10)
    assert model.output_shape == (None, 10)
    assert model.input_shape == (None, 28, 28, 1)


def test_classic_cnn_layers():
    model = kdist.models.build("cnn", input_shape=(28, 28, 1), num_classes=10)
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert [(c.filters, c.kernel_size) for c in convs] == [(32, (5, 5)), (64, (5, 5))]
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    assert [d.units for d in dense] == [1024, 10]


def test_model_factory_overrides_and_errors():
    model = kdist.models.build("mlp", input_shape=(4,), num_classes=3, units=[7, 5])
    assert [layer.units for layer in model.layers if hasattr(layer, "units")] == [7, 5, 3]
    with pytest.raises(TypeError, match="input_shape"):
        kdist.models.build("mlp", num_classes=3)


def test_models_built_in_scope_use_the_strategy():
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = kdist.models.build("mlp", input_shape=(4,), num_classes=3)
    assert type(model.trainable_variables[0].value).__name__ == "MirroredVariable"


def test_synthetic_data_is_learnable(tmp_path: Path):
    cfg = compose(
        [
            "data=synthetic",
            "data.source.input_shape=[16]",
            "data.source.num_classes=4",
            "trainer.epochs=8",
            "trainer.verbose=0",
            "callbacks=minimal",
        ]
    )
    exp = kdist.Experiment(cfg, run_dir=tmp_path)
    assert exp.source.input_shape == (16,)
    exp.fit()
    assert exp.metrics()["validation"]["accuracy"] > 0.7
