"""keras.io `guides/transfer_learning`: a base model frozen (`trainable = False`), called
with `training=False` so its BatchNormalization stays in inference mode, a new head on
top; `evaluate` on held-out data afterwards."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2, "batch_size": 16, "shuffle": False}
COMPARE = "weights"
EVALUATE = True


def _images(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=n)
    x = rng.normal(size=(n, 24, 24, 3)).astype("float32")
    x[labels == 1] += 0.5
    return x, labels.astype("float32")


def make_data(seed):
    x, y = _images(160, seed)
    return {"x": x, "y": y, "validation_data": _images(32, seed + 10)}


def make_test_data(seed):
    return _images(48, seed)


def _base():
    inputs = keras.Input((24, 24, 3))
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Conv2D(8, 3, activation="relu")(x)
    return keras.Model(inputs, x, name="pretrained_base")


def make_model():
    keras.utils.set_random_seed(1)
    base_model = _base()
    base_model.trainable = False
    inputs = keras.Input(shape=(24, 24, 3))
    x = base_model(inputs, training=False)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dropout(0.2)(x)
    outputs = keras.layers.Dense(1)(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.BinaryAccuracy()],
    )
    return model
