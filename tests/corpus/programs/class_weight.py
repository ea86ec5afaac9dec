"""keras.io `structured_data/imbalanced_classification`: a rare positive class, a
normalized MLP with dropout, `Dense(1, sigmoid)`, `binary_crossentropy` with counting
metrics, and `class_weight={0: 1/neg, 1: 1/pos}`; `validation_data`."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2, "batch_size": 64, "shuffle": False}
COMPARE = "weights"


def _fraud(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 12)).astype("float32")
    y = (x[:, 0] > 1.2).astype("int64")[:, None]
    return x, y


def make_data(seed):
    x, y = _fraud(320, seed)
    counts = np.bincount(y[:, 0])
    return {
        "x": x,
        "y": y,
        "class_weight": {0: 1.0 / counts[0], 1: 1.0 / counts[1]},
        "validation_data": _fraud(64, seed + 10),
    }


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input(shape=(12,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss="binary_crossentropy",
        metrics=[
            keras.metrics.FalseNegatives(name="fn"),
            keras.metrics.FalsePositives(name="fp"),
            keras.metrics.Precision(name="precision"),
            keras.metrics.Recall(name="recall"),
        ],
    )
    return model
