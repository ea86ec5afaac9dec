"""Issue 37 item 1 (a regression since 0.9): a subclassed model with its own `train_step`,
made by `m = MNISTModel(); m.build((None, 28, 28, 1))` with no `build()` method: Keras
warns and marks it built with its sublayers unbuilt; they build on the first batch."""

import keras
import numpy as np
import tensorflow as tf
from keras import layers

FIT_KWARGS = {"epochs": 2, "batch_size": 32, "shuffle": False}
COMPARE = "weights"
WARNINGS = [(".*does not have a `build\\(\\)` method implemented", UserWarning)]

loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


class MNISTModel(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.conv = layers.Conv2D(4, 3, activation="relu")
        self.pool = layers.GlobalAveragePooling2D()
        self.dense = layers.Dense(10)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    @property
    def metrics(self):
        return [self.loss_tracker]

    def call(self, x):
        return self.dense(self.pool(self.conv(x)))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            logits = self(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


def make_data(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, size=128)
    x = rng.uniform(size=(128, 28, 28, 1)).astype("float32")
    x[np.arange(128), y * 2 + 4] += 1.0
    return {"x": x, "y": y}


def make_model():
    keras.utils.set_random_seed(1)
    model = MNISTModel()
    model.build((None, 28, 28, 1))
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    return model
