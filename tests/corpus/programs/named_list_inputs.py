"""keras.io's functional-API guide, multi-input: a model made with a LIST of named
`keras.Input`s, fit with `x` as a dict keyed by input name (Keras maps the keys to the
names; issue 37 item 4)."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2, "batch_size": 32, "shuffle": False}
COMPARE = "weights"


def make_data(seed):
    rng = np.random.default_rng(seed)
    image = rng.normal(size=(160, 16)).astype("float32")
    meta = rng.normal(size=(160, 4)).astype("float32")
    y = (image[:, 0] + meta[:, 0] > 0).astype("int64")
    # Keyed in another order than the model's inputs: Keras goes by name.
    return {"x": {"meta": meta, "image": image}, "y": y}


def make_model():
    keras.utils.set_random_seed(1)
    image = keras.Input(shape=(16,), name="image")
    meta = keras.Input(shape=(4,), name="meta")
    x = keras.layers.concatenate([keras.layers.Dense(8, activation="relu")(image), meta])
    outputs = keras.layers.Dense(2)(x)
    model = keras.Model(inputs=[image, meta], outputs=outputs)
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model
