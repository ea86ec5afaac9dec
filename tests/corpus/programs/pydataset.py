"""Keras's `PyDataset` documentation example: a CIFAR10PyDataset serving batches of 32
(`math.ceil` batches, so a partial last one), fit with `epochs` and a second PyDataset as
`validation_data`; a small convnet. `fit`'s default `shuffle=True` reorders a PyDataset's
batches each epoch with Python's `random` (kdist seeds its own order from `runtime.seed`),
so the two sides train on other orders: the loss per epoch is compared, within 0.05 as in
`default_shuffle` (weights equal with `shuffle=False`: `tests/test_fit_keras_meaning.py`)."""

import math

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2}
COMPARE = "loss"
TOLERANCE = 0.05
# The two sides shuffle with their own seeds: the batch hooks are compared by hook, index
# and keys, the epoch logs by value within TOLERANCE.
TRACE_BATCH_VALUES = False


class CIFAR10PyDataset(keras.utils.PyDataset):
    def __init__(self, x_set, y_set, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y = x_set, y_set
        self.batch_size = batch_size

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, idx):
        low = idx * self.batch_size
        high = min(low + self.batch_size, len(self.x))
        return self.x[low:high], self.y[low:high]


def _cifar(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, size=n)
    x = rng.uniform(size=(n, 16, 16, 3)).astype("float32")
    x[np.arange(n), y] += 0.5
    return x, y


def make_data(seed):
    return {
        "x": CIFAR10PyDataset(*_cifar(200, seed), batch_size=32),
        "validation_data": CIFAR10PyDataset(*_cifar(48, seed + 10), batch_size=32),
    }


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((16, 16, 3)),
            keras.layers.Conv2D(8, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model
