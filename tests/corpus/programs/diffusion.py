"""keras.io `generative/ddim` in small: a DiffusionModel with a Normalization layer adapted
on the images, a denoising network on `[noisy_images, noise_variances]`, an EMA copy of
it, its own `compile` adding loss trackers, its own `train_step` drawing noises and
diffusion times from a seed generator, `compile(optimizer=AdamW, loss=mean_absolute_error)`
and `fit(dataset of images)`."""

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

IMAGE_SIZE, EMA = 16, 0.999
MIN_SIGNAL_RATE, MAX_SIGNAL_RATE = 0.02, 0.95
FIT_KWARGS = {"epochs": 2}
COMPARE = "weights"
# A model with no `call`: Keras's own fit cannot build it under a strategy ("Unable to
# automatically build the model"); kdist builds it through its own train_step and trains.
KERAS_MIRRORED_FAILS = "no `call`: Keras's fit cannot build the model under a strategy"
LOSS_KEY = "n_loss"


def get_network(image_size):
    noisy_images = keras.Input(shape=(image_size, image_size, 3))
    noise_variances = keras.Input(shape=(1, 1, 1))
    e = layers.UpSampling2D(size=image_size, interpolation="nearest")(noise_variances)
    x = layers.Conv2D(8, kernel_size=1)(noisy_images)
    x = layers.Concatenate()([x, e])
    x = layers.Conv2D(8, kernel_size=3, padding="same", activation="swish")(x)
    x = layers.Conv2D(3, kernel_size=1, kernel_initializer="zeros")(x)
    return keras.Model([noisy_images, noise_variances], x, name="residual_unet")


class DiffusionModel(keras.Model):
    def __init__(self, image_size):
        super().__init__()
        self.image_size = image_size
        self.normalizer = layers.Normalization()
        self.network = get_network(image_size)
        self.ema_network = keras.models.clone_model(self.network)
        self.seed_generator = keras.random.SeedGenerator(42)

    def compile(self, **kwargs):
        super().compile(**kwargs)
        self.noise_loss_tracker = keras.metrics.Mean(name="n_loss")
        self.image_loss_tracker = keras.metrics.Mean(name="i_loss")

    @property
    def metrics(self):
        return [self.noise_loss_tracker, self.image_loss_tracker]

    def diffusion_schedule(self, diffusion_times):
        start_angle = ops.cast(ops.arccos(MAX_SIGNAL_RATE), "float32")
        end_angle = ops.cast(ops.arccos(MIN_SIGNAL_RATE), "float32")
        diffusion_angles = start_angle + diffusion_times * (end_angle - start_angle)
        return ops.sin(diffusion_angles), ops.cos(diffusion_angles)

    def denoise(self, noisy_images, noise_rates, signal_rates, training):
        network = self.network if training else self.ema_network
        pred_noises = network([noisy_images, noise_rates**2], training=training)
        pred_images = (noisy_images - noise_rates * pred_noises) / signal_rates
        return pred_noises, pred_images

    def train_step(self, images):
        images = self.normalizer(images, training=True)
        batch_size = ops.shape(images)[0]
        noises = keras.random.normal(
            shape=(batch_size, self.image_size, self.image_size, 3), seed=self.seed_generator
        )
        diffusion_times = keras.random.uniform(
            shape=(batch_size, 1, 1, 1), minval=0.0, maxval=1.0, seed=self.seed_generator
        )
        noise_rates, signal_rates = self.diffusion_schedule(diffusion_times)
        noisy_images = signal_rates * images + noise_rates * noises
        with tf.GradientTape() as tape:
            pred_noises, pred_images = self.denoise(
                noisy_images, noise_rates, signal_rates, training=True
            )
            noise_loss = self.loss(noises, pred_noises)
            image_loss = self.loss(images, pred_images)
        gradients = tape.gradient(noise_loss, self.network.trainable_weights)
        self.optimizer.apply_gradients(zip(gradients, self.network.trainable_weights, strict=True))
        self.noise_loss_tracker.update_state(noise_loss)
        self.image_loss_tracker.update_state(image_loss)
        for weight, ema_weight in zip(self.network.weights, self.ema_network.weights, strict=True):
            ema_weight.assign(EMA * ema_weight + (1 - EMA) * weight)
        return {m.name: m.result() for m in self.metrics}


def _images(seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(96, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
    return tf.data.Dataset.from_tensor_slices(x).batch(32, drop_remainder=True)


def make_data(seed):
    return {"x": _images(seed)}


def make_model():
    keras.utils.set_random_seed(1)
    model = DiffusionModel(IMAGE_SIZE)
    model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=1e-4),
        loss=keras.losses.mean_absolute_error,
    )
    model.normalizer.adapt(_images(0))
    return model
