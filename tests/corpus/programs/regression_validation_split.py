"""A tabular regression as the Keras regression tutorials write it: a Normalization layer
adapted on the features, a small MLP, `loss="mean_absolute_error"` with `mse` as a metric,
`validation_split=0.2`, then `evaluate(x_test, y_test)` and `predict(x_test)`."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 3, "batch_size": 32, "validation_split": 0.2, "shuffle": False}
COMPARE = "weights"
EVALUATE = PREDICT = True


def _cars(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 9)) * np.arange(1, 10) * 20 + 100
    y = x[:, 0] * 0.05 - x[:, 3] * 0.02 + rng.normal(size=n)
    return x.astype("float32"), y.astype("float32")


def make_data(seed):
    x, y = _cars(250, seed)
    return {"x": x, "y": y}


def make_test_data(seed):
    return _cars(60, seed)


def make_model():
    keras.utils.set_random_seed(1)
    normalizer = keras.layers.Normalization(axis=-1)
    normalizer.adapt(_cars(250, 0)[0])
    model = keras.Sequential(
        [
            normalizer,
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(
        loss="mean_absolute_error", optimizer=keras.optimizers.Adam(0.01), metrics=["mse"]
    )
    return model
