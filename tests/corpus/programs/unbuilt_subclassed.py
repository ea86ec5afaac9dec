"""Issue 37 item 2: an unbuilt subclassed model (one `Dense(4)` made in `__init__`) fit on
(N, 8) data: `fit` builds it on its first batch, a (8, 4) kernel; then `predict`."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2, "batch_size": 32, "shuffle": False}
COMPARE = "weights"
PREDICT = True


class Net(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(4)

    def call(self, x):
        return self.dense(x)


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    return x, x[:, :4].argmax(1)


def make_data(seed):
    x, y = _data(128, seed)
    return {"x": x, "y": y}


def make_test_data(seed):
    return _data(32, seed)


def make_model():
    keras.utils.set_random_seed(1)
    model = Net()
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def check(reference, ours):
    assert ours.model.dense.kernel.shape == (8, 4), ours.model.dense.kernel.shape
