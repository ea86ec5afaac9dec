"""Issue 37 item 6: 281 examples, batch 32, 3 epochs: `fit` trains a partial last batch
(25 examples) every epoch. An MLP classifier as keras.io's getting-started writes it."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 3, "batch_size": 32, "shuffle": False}
COMPARE = "weights"


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(281, 8)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64") + (x[:, 2] > 0.5)
    return {"x": x, "y": y}


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model
