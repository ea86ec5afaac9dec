"""keras.io's "customizing what happens in fit" guide, the evaluation half: a model whose
own `test_step` updates its metrics (used by `fit`'s validation and by `evaluate`) and
whose `predict_step` returns a dict (probabilities and the argmax)."""

import keras
import numpy as np
from keras import ops

FIT_KWARGS = {"epochs": 2, "batch_size": 16, "shuffle": False}
COMPARE = "weights"
EVALUATE = True
PREDICT = True


class CustomModel(keras.Model):
    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    def predict_step(self, data):
        x = data[0] if isinstance(data, tuple) else data
        logits = self(x, training=False)
        return {"probabilities": ops.softmax(logits), "label": ops.argmax(logits, axis=-1)}


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    return x, (x[:, 0] + x[:, 2] > 0).astype("int64")


def make_data(seed):
    x, y = _data(80, seed)
    return {"x": x, "y": y, "validation_data": _data(40, seed + 3)}


def make_test_data(seed):
    return _data(40, seed)


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((8,))
    outputs = keras.layers.Dense(2)(keras.layers.Dense(8, activation="relu")(inputs))
    model = CustomModel(inputs, outputs)
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model
