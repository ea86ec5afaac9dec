"""keras.io `vision/oxford_pets_image_segmentation`: a small U-Net-like encoder/decoder
with per-pixel softmax over 3 classes, `sparse_categorical_crossentropy` on (H, W, 1)
masks, then `predict` of per-pixel probabilities."""

import keras
import numpy as np

IMG_SIZE, NUM_CLASSES = (32, 32), 3
FIT_KWARGS = {"epochs": 2, "batch_size": 16, "shuffle": False}
COMPARE = "weights"
PREDICT = True


def _pets(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, *IMG_SIZE, 3)).astype("float32")
    masks = (x[..., :1] * NUM_CLASSES).astype("int64").clip(0, NUM_CLASSES - 1)
    return x, masks


def make_data(seed):
    x, y = _pets(96, seed)
    return {"x": x, "y": y, "validation_data": _pets(32, seed + 10)}


def make_test_data(seed):
    return _pets(20, seed)


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input(shape=(*IMG_SIZE, 3))
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("relu")(x)
    previous_block_activation = x
    for filters in [16]:
        x = keras.layers.Activation("relu")(x)
        x = keras.layers.SeparableConv2D(filters, 3, padding="same")(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.MaxPooling2D(3, strides=2, padding="same")(x)
        residual = keras.layers.Conv2D(filters, 1, strides=2, padding="same")(
            previous_block_activation
        )
        x = keras.layers.add([x, residual])
        previous_block_activation = x
    for filters in [16, 8]:
        x = keras.layers.Activation("relu")(x)
        x = keras.layers.Conv2DTranspose(filters, 3, padding="same")(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.UpSampling2D(2)(x)
        residual = keras.layers.UpSampling2D(2)(previous_block_activation)
        residual = keras.layers.Conv2D(filters, 1, padding="same")(residual)
        x = keras.layers.add([x, residual])
        previous_block_activation = x
    outputs = keras.layers.Conv2D(NUM_CLASSES, 3, activation="softmax", padding="same")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy")
    return model
