"""keras.io's "making new layers and models via subclassing" guide: an
`ActivityRegularizationLayer` calling `self.add_loss`, beside Dense layers with
`kernel_regularizer=l2` and `activity_regularizer=l1`; the regularization losses are
added to the compiled loss in `fit`."""

import keras
import numpy as np
from keras import ops

FIT_KWARGS = {"epochs": 3, "batch_size": 16, "shuffle": False}
COMPARE = "weights"
EVALUATE = True


class ActivityRegularizationLayer(keras.layers.Layer):
    def __init__(self, rate=1e-2, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate

    def call(self, inputs):
        self.add_loss(self.rate * ops.sum(inputs))
        return inputs


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 10)).astype("float32")
    return x, (x[:, 0] * x[:, 1] > 0).astype("int64")


def make_data(seed):
    x, y = _data(96, seed)
    return {"x": x, "y": y}


def make_test_data(seed):
    return _data(32, seed)


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((10,))
    x = keras.layers.Dense(
        16,
        activation="relu",
        kernel_regularizer=keras.regularizers.l2(1e-3),
        activity_regularizer=keras.regularizers.l1(1e-4),
    )(inputs)
    x = ActivityRegularizationLayer(1e-3)(x)
    outputs = keras.layers.Dense(2, kernel_regularizer=keras.regularizers.l1_l2(1e-4, 1e-3))(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model
