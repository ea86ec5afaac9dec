"""Keras's optimizer argument `use_ema=True` (keras.io's optimizer docs; the ConvNeXt and
ViT examples train with it): `fit` ends by writing the moving averages into the model's
weights (`optimizer.finalize_variable_values`); issue 42 item 2."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 3, "batch_size": 16, "shuffle": False}
COMPARE = "weights"
EVALUATE = True


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    return x, (x[:, 0] - x[:, 3] > 0).astype("int64")


def make_data(seed):
    x, y = _data(96, seed)
    return {"x": x, "y": y}


def make_test_data(seed):
    return _data(32, seed)


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2, use_ema=True, ema_momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model
