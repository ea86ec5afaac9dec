"""keras.io's "customizing what happens in fit" guide (TensorFlow): a functional
CustomModel whose `train_step` and `test_step` use `compute_loss`, `optimizer.apply` and
the compiled metrics; `compile(optimizer="adam", loss="mse", metrics=["mae"])`,
`fit(x, y)` on float targets, then `evaluate`."""

import keras
import numpy as np
import tensorflow as tf

FIT_KWARGS = {"epochs": 3, "batch_size": 32, "shuffle": False}
COMPARE = "weights"
EVALUATE = True


class CustomModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply(gradients, trainable_vars)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

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


def _data(n, seed):
    rng = np.random.default_rng(seed)
    return rng.random((n, 32)).astype("float32"), rng.random((n, 1)).astype("float32")


def make_data(seed):
    x, y = _data(192, seed)
    return {"x": x, "y": y}


def make_test_data(seed):
    return _data(64, seed)


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input(shape=(32,))
    outputs = keras.layers.Dense(1)(inputs)
    model = CustomModel(inputs, outputs)
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    return model
