"""`EpochTensorBoard` writes the records Keras's `TensorBoard` writes, with fewer ops."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest

from kdist.callbacks.tensorboard import EpochTensorBoard


def _records(folder: Path) -> dict[tuple[str, int], float]:
    import tensorflow as tf

    found = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                number = (
                    tf.make_ndarray(value.tensor)
                    if value.HasField("tensor")
                    else value.simple_value
                )
                found[(value.tag, int(event.step))] = float(np.asarray(number))
    return found


def _fit(callback: keras.callbacks.Callback) -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    y = np.arange(32) % 3
    model.fit(x, y, batch_size=8, epochs=2, validation_data=(x, y), callbacks=[callback], verbose=0)


def test_the_validation_records_equal_keras_tensorboards(tmp_path: Path):
    _fit(keras.callbacks.TensorBoard(tmp_path / "keras", update_freq="epoch", write_graph=False))
    _fit(EpochTensorBoard(tmp_path / "kdist", update_freq="epoch", write_graph=False))
    keras_val = _records(tmp_path / "keras" / "validation")
    kdist_val = _records(tmp_path / "kdist" / "validation")
    assert {("evaluation_loss_vs_iterations", 4), ("evaluation_loss_vs_iterations", 8)} <= set(
        keras_val
    )
    assert set(kdist_val) == set(keras_val)
    for key, value in keras_val.items():
        assert kdist_val[key] == pytest.approx(value, abs=1e-6), key
    assert set(_records(tmp_path / "kdist" / "train")) == set(
        _records(tmp_path / "keras" / "train")
    )
