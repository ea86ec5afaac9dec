"""keras.io `vision/image_classification_from_scratch`: augmentation layers (RandomFlip,
RandomRotation) and Rescaling inside the model, a small residual-free convnet, binary
`Dense(1)` logits with `BinaryCrossentropy(from_logits=True)` on 0/1 labels."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2, "batch_size": 32, "shuffle": False}
COMPARE = "weights"


def make_data(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=192)
    images = rng.uniform(0, 255, size=(192, 32, 32, 3)).astype("float32")
    images[labels == 1, :, :16, 0] = 255.0  # "dogs" have a red left half
    validation = rng.uniform(0, 255, size=(64, 32, 32, 3)).astype("float32")
    return {
        "x": images,
        "y": labels,
        "validation_data": (validation, rng.integers(0, 2, size=64)),
    }


def make_model():
    keras.utils.set_random_seed(1)
    data_augmentation = keras.Sequential(
        [keras.layers.RandomFlip("horizontal"), keras.layers.RandomRotation(0.1)]
    )
    inputs = keras.Input(shape=(32, 32, 3))
    x = data_augmentation(inputs)
    x = keras.layers.Rescaling(1.0 / 255)(x)
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.SeparableConv2D(16, 3, padding="same")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dropout(0.25)(x)
    outputs = keras.layers.Dense(1, activation=None)(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-4),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.BinaryAccuracy(name="acc")],
    )
    return model
