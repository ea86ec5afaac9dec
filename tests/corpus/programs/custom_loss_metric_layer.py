"""keras.io's "training & evaluation with the built-in methods" guide: a custom `Loss`
subclass (CustomMSE with a regularization factor), a custom `Metric` subclass
(CategoricalTruePositives) and a layer that adds a loss (`add_loss`), on one-hot targets;
then `evaluate`."""

import keras
import numpy as np
from keras import layers, ops

FIT_KWARGS = {"epochs": 2, "batch_size": 32, "shuffle": False}
COMPARE = "weights"
EVALUATE = True


class CustomMSE(keras.losses.Loss):
    def __init__(self, regularization_factor=0.1, name="custom_mse"):
        super().__init__(name=name)
        self.regularization_factor = regularization_factor

    def call(self, y_true, y_pred):
        mse = ops.mean(ops.square(y_true - y_pred), axis=-1)
        reg = ops.mean(ops.square(0.5 - y_pred), axis=-1)
        return mse + reg * self.regularization_factor


class CategoricalTruePositives(keras.metrics.Metric):
    def __init__(self, name="categorical_true_positives", **kwargs):
        super().__init__(name=name, **kwargs)
        self.true_positives = self.add_variable(shape=(), name="ctp", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.reshape(ops.argmax(y_pred, axis=1), (-1, 1))
        y_true = ops.reshape(ops.argmax(y_true, axis=1), (-1, 1))
        values = ops.cast(y_true, "int32") == ops.cast(y_pred, "int32")
        values = ops.cast(values, "float32")
        if sample_weight is not None:
            values = ops.multiply(values, ops.cast(sample_weight, "float32"))
        self.true_positives.assign_add(ops.sum(values))

    def result(self):
        return self.true_positives

    def reset_state(self):
        self.true_positives.assign(0.0)


class ActivityRegularizationLayer(layers.Layer):
    def call(self, inputs):
        self.add_loss(ops.sum(inputs) * 0.01)
        return inputs


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 32)).astype("float32")
    return x, keras.utils.to_categorical(x[:, :10].argmax(1), 10)


def make_data(seed):
    x, y = _data(192, seed)
    return {"x": x, "y": y}


def make_test_data(seed):
    return _data(64, seed)


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input(shape=(32,), name="digits")
    x = layers.Dense(16, activation="relu", name="dense_1")(inputs)
    x = ActivityRegularizationLayer()(x)
    x = layers.Dense(16, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
        loss=CustomMSE(),
        metrics=[CategoricalTruePositives()],
    )
    return model
