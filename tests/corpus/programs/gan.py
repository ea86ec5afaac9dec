"""keras.io `generative/dcgan_overriding_train_step` (Keras 3): a GAN with its own
`compile(d_optimizer, g_optimizer, loss_fn)` that calls `super().compile()`, its own
`train_step` and `d_loss`/`g_loss` metrics, fit on a `tf.data.Dataset` of images only
(batched, mapped to [0, 1]). Label noise uses the GAN's seed generator (keras.io draws
it unseeded with `tf.random.uniform`, which no two runs could match)."""

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

LATENT_DIM = 8
FIT_KWARGS = {"epochs": 2}
COMPARE = "weights"
# A model with no `call`: Keras's own fit cannot build it under a strategy ("Unable to
# automatically build the model"); kdist builds it through its own train_step and trains.
KERAS_MIRRORED_FAILS = "no `call`: Keras's fit cannot build the model under a strategy"
LOSS_KEY = "d_loss"


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def train_step(self, real_images):
        batch_size = ops.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator
        )
        generated_images = self.generator(random_latent_vectors)
        combined_images = ops.concatenate([generated_images, real_images], axis=0)
        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))], axis=0)
        labels += 0.05 * keras.random.uniform(ops.shape(labels), seed=self.seed_generator)
        with tf.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(
            zip(grads, self.discriminator.trainable_weights, strict=True)
        )
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator
        )
        misleading_labels = ops.zeros((batch_size, 1))
        with tf.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights, strict=True))
        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {"d_loss": self.d_loss_metric.result(), "g_loss": self.g_loss_metric.result()}


def make_data(seed):
    rng = np.random.default_rng(seed)
    faces = rng.integers(0, 256, size=(128, 16, 16, 3)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices(faces).batch(32)
    return {"x": dataset.map(lambda x: x / 255.0)}


def make_model():
    keras.utils.set_random_seed(1)
    discriminator = keras.Sequential(
        [
            keras.Input(shape=(16, 16, 3)),
            layers.Conv2D(8, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(16, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Flatten(),
            layers.Dropout(0.2),
            layers.Dense(1, activation="sigmoid"),
        ],
        name="discriminator",
    )
    generator = keras.Sequential(
        [
            keras.Input(shape=(LATENT_DIM,)),
            layers.Dense(4 * 4 * 16),
            layers.Reshape((4, 4, 16)),
            layers.Conv2DTranspose(16, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2DTranspose(8, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(3, kernel_size=5, padding="same", activation="sigmoid"),
        ],
        name="generator",
    )
    gan = GAN(discriminator=discriminator, generator=generator, latent_dim=LATENT_DIM)
    gan.compile(
        d_optimizer=keras.optimizers.Adam(learning_rate=1e-4),
        g_optimizer=keras.optimizers.Adam(learning_rate=1e-4),
        loss_fn=keras.losses.BinaryCrossentropy(),
    )
    return gan
