"""keras.io `vision/mnist_convnet`: a Sequential convnet on 28x28x1 digits, one-hot labels
with `categorical_crossentropy`, `validation_split=0.1`, then `evaluate` and `predict`."""

import keras
import numpy as np

NUM_CLASSES = 10
FIT_KWARGS = {"epochs": 2, "batch_size": 32, "validation_split": 0.1, "shuffle": False}
COMPARE = "weights"
EVALUATE = PREDICT = True


def _digits(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, size=n)
    x = rng.uniform(0, 255, size=(n, 28, 28)).astype("float32")
    x[np.arange(n), labels * 2 + 4, 4:24] = 255.0  # a bright row per class
    x = np.expand_dims(x / 255.0, -1)
    return x, keras.utils.to_categorical(labels, NUM_CLASSES)


def make_data(seed):
    x, y = _digits(256, seed)
    return {"x": x, "y": y}


def make_test_data(seed):
    return _digits(64, seed)


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(4, kernel_size=(3, 3), activation="relu"),
            keras.layers.MaxPooling2D(pool_size=(2, 2)),
            keras.layers.Conv2D(8, kernel_size=(3, 3), activation="relu"),
            keras.layers.MaxPooling2D(pool_size=(2, 2)),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(NUM_CLASSES, activation="softmax"),
        ]
    )
    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    return model
