"""keras.io's "training & evaluation" guide, sample weights: `sample_weight` of ones with
class 5 weighted 2.0, `fit(x, y, sample_weight=..., batch_size=64)` over 300 examples
(a partial last batch), and `validation_data` with its own sample weights."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2, "batch_size": 64, "shuffle": False}
COMPARE = "weights"


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 20)).astype("float32")
    return x, x[:, :10].argmax(1)


def make_data(seed):
    x, y = _data(300, seed)
    sample_weight = np.ones(shape=(len(y),))
    sample_weight[y == 5] = 2.0
    xv, yv = _data(64, seed + 10)
    return {
        "x": x,
        "y": y,
        "sample_weight": sample_weight,
        "validation_data": (xv, yv, np.where(yv == 5, 2.0, 1.0)),
    }


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input(shape=(20,), name="digits")
    x = keras.layers.Dense(16, activation="relu", name="dense_1")(inputs)
    outputs = keras.layers.Dense(10, activation="softmax", name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(
        optimizer=keras.optimizers.RMSprop(),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="acc")],
    )
    return model
