"""keras.io `vision/simsiam`, with its augmentation inside the model (issue 37 item 5): an
augmenter of RandomFlip and RandomTranslation layers built on their first call, an
encoder and a predictor, its own `train_step` (two augmented views, stop-gradient cosine
loss) and loss tracker, no `call`; `fit(images)` with arrays and no `y`."""

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

FIT_KWARGS = {"epochs": 2, "batch_size": 32, "shuffle": False}
COMPARE = "weights"
# A model with no `call`: Keras's own fit cannot build it under a strategy ("Unable to
# automatically build the model"); kdist builds it through its own train_step and trains.
KERAS_MIRRORED_FAILS = "no `call`: Keras's fit cannot build the model under a strategy"


def compute_loss(p, z):
    z = ops.stop_gradient(z)
    p = keras.utils.normalize(p, axis=1, order=2)
    z = keras.utils.normalize(z, axis=1, order=2)
    return -ops.mean(ops.sum(p * z, axis=1))


class SimSiam(keras.Model):
    def __init__(self, encoder, predictor):
        super().__init__()
        self.augmenter = keras.Sequential(
            [
                layers.RandomFlip("horizontal", seed=3),
                layers.RandomTranslation(0.1, 0.1, seed=4),
            ]
        )
        self.encoder = encoder
        self.predictor = predictor
        self.loss_tracker = keras.metrics.Mean(name="loss")

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, data):
        ds_one = self.augmenter(data, training=True)
        ds_two = self.augmenter(data, training=True)
        with tf.GradientTape() as tape:
            z1, z2 = self.encoder(ds_one), self.encoder(ds_two)
            p1, p2 = self.predictor(z1), self.predictor(z2)
            loss = compute_loss(p1, z2) / 2 + compute_loss(p2, z1) / 2
        learnable_params = self.encoder.trainable_variables + self.predictor.trainable_variables
        gradients = tape.gradient(loss, learnable_params)
        self.optimizer.apply_gradients(zip(gradients, learnable_params, strict=True))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


def make_data(seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(size=(128, 16, 16, 3)).astype("float32")}


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((16, 16, 3))
    x = layers.Rescaling(scale=2.0, offset=-1.0)(inputs)
    x = layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(16, use_bias=False)(x)
    x = layers.BatchNormalization()(x)
    outputs = layers.ReLU()(x)
    encoder = keras.Model(inputs, outputs, name="encoder")
    predictor = keras.Sequential(
        [
            keras.Input((16,)),
            layers.Dense(8, use_bias=False),
            layers.ReLU(),
            layers.BatchNormalization(),
            layers.Dense(16),
        ],
        name="predictor",
    )
    simsiam = SimSiam(encoder, predictor)
    simsiam.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.6))
    return simsiam
