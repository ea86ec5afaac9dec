"""A user's second `fit` after setting `layer.trainable = False` without recompiling (a
common slip in the transfer-learning guide's comments): what Keras does then, kdist does.
Keras's `fit` reuses its `train_function`, whatever it then trains; the judge is `fit`."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 1, "batch_size": 16, "shuffle": False}
COMPARE = "weights"


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(64, 8)).astype("float32")
    return {"x": x, "y": (x @ rng.normal(size=(8, 1))).astype("float32")}


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(8, activation="relu", name="hidden"),
            keras.layers.Dense(1, name="head"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    return model


def fit_keras(model, kwargs):
    model.fit(verbose=0, **kwargs)
    model.get_layer("hidden").trainable = False
    return model.fit(verbose=0, **kwargs)


def fit_kdist(exp, kwargs):
    exp.fit(verbose=0, **kwargs)
    exp.model.get_layer("hidden").trainable = False
    return exp.fit(verbose=0, **kwargs)
