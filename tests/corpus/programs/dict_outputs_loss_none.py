"""A dict-output model whose auxiliary head has no loss (`loss={"cls": ..., "aux": None}`,
issue 37 item 9): `fit(x, y)` with targets for `cls` alone trains the classifier;
metrics per output as a dict, as Keras requires for a dict output."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2, "batch_size": 32, "shuffle": False}
COMPARE = "weights"
WARNINGS = [("Gradients do not exist", UserWarning)]


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(160, 8)).astype("float32")
    return {"x": x, "y": (x[:, 0] > 0).astype("int64")}


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    cls = keras.layers.Dense(2, name="cls")(hidden)
    aux = keras.layers.Dense(1, name="aux")(hidden)
    model = keras.Model(inputs, {"cls": cls, "aux": aux})
    model.compile(
        optimizer="adam",
        loss={
            "cls": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "aux": None,
        },
        metrics={"cls": ["accuracy"]},
    )
    return model
