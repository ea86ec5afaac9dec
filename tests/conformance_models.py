"""Models as Keras users write them, for the conformance suite (tests/test_keras_conformance.py).

Each builder takes no argument (kdist passes `input_shape`/`num_classes` only to callables
that accept them), so they also serve as `model._target_` in subprocess runs.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

FEATURES, CLASSES = 8, 3


def functional() -> keras.Model:
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(CLASSES)(hidden))


def sequential() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(16, activation="tanh"),
            keras.layers.Dense(CLASSES),
        ]
    )


class Subclassed(keras.Model):
    """Layers made in `__init__`, no input shape: no variables until the first call."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(CLASSES)

    def call(self, inputs: Any) -> Any:
        return self.out(self.hidden(inputs))


class OwnTrainStep(Subclassed):
    """A `train_step` of its own: clips the gradients and tracks the gradient norm."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.norm_tracker = keras.metrics.Mean(name="grad_norm")
        # As in Keras's guide to custom train steps: the step tracks its own loss.
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            scaled = self.optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled, self.trainable_variables)
        gradients, norm = tf.clip_by_global_norm(gradients, 0.5)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
        self.norm_tracker.update_state(norm)
        self.loss_tracker.update_state(loss)
        return self.compute_metrics(x, y, y_pred)


class OwnComputeLoss(Subclassed):
    """A `compute_loss` of its own: the compiled loss plus an activity penalty."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training=training)
        # Keras scales each replica's loss by the replica count: so must a penalty.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return loss + 0.01 * keras.ops.mean(keras.ops.square(y_pred)) / replicas


def two_outputs() -> keras.Model:
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    cls = keras.layers.Dense(CLASSES, name="cls")(hidden)
    aux = keras.layers.Dense(1, name="aux")(hidden)
    return keras.Model(inputs, {"cls": cls, "aux": aux})


def regressor() -> keras.Model:
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1)(hidden))


def dict_inputs() -> keras.Model:
    a = keras.Input((FEATURES,), name="a")
    b = keras.Input((4,), name="b")
    joined = keras.layers.Concatenate()([keras.layers.Dense(8)(a), b])
    hidden = keras.layers.Dense(16, activation="relu")(joined)
    return keras.Model({"a": a, "b": b}, keras.layers.Dense(CLASSES)(hidden))


def batchnorm_dropout() -> keras.Model:
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16)(inputs)
    hidden = keras.layers.BatchNormalization()(hidden)
    hidden = keras.layers.Activation("relu")(hidden)
    hidden = keras.layers.Dropout(0.3, seed=7)(hidden)
    return keras.Model(inputs, keras.layers.Dense(CLASSES)(hidden))


def l2_regularised() -> keras.Model:
    l2 = keras.regularizers.L2(0.01)
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu", kernel_regularizer=l2)(inputs)
    return keras.Model(inputs, keras.layers.Dense(CLASSES, kernel_regularizer=l2)(hidden))


def subclassed() -> keras.Model:
    return Subclassed()


def own_train_step() -> keras.Model:
    return OwnTrainStep()


def own_compute_loss() -> keras.Model:
    return OwnComputeLoss()


# -- models that report their own metrics (keras.io's generative examples, Keras 3) --------

LATENT = 2


class Sampling(keras.layers.Layer):
    """keras.io's VAE sampling layer: `z = mean + exp(log_var / 2) * epsilon`."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs: Any) -> Any:
        z_mean, z_log_var = inputs
        batch, dim = keras.ops.shape(z_mean)[0], keras.ops.shape(z_mean)[1]
        epsilon = keras.random.normal(shape=(batch, dim), seed=self.seed_generator)
        return z_mean + keras.ops.exp(0.5 * z_log_var) * epsilon


class VAE(keras.Model):
    """keras.io's `examples/generative/vae.py` (Keras 3), on feature vectors in [0, 1].

    Its own `train_step` and trackers: it logs `total_loss`, `reconstruction_loss` and
    `kl_loss` (no `loss`), and is compiled with an optimizer only. The one change from
    keras.io: the step takes the features out of `(x, y)` (kdist's array sources carry
    targets; keras.io fits on the images alone). Like keras.io's, it has no `call` and
    no `test_step`: it trains without validation.
    """

    def __init__(self, encoder: keras.Model, decoder: keras.Model, **kwargs: Any):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.total_loss_tracker = keras.metrics.Mean(name="total_loss")
        self.reconstruction_loss_tracker = keras.metrics.Mean(name="reconstruction_loss")
        self.kl_loss_tracker = keras.metrics.Mean(name="kl_loss")

    @property
    def metrics(self) -> list[Any]:
        return [
            self.total_loss_tracker,
            self.reconstruction_loss_tracker,
            self.kl_loss_tracker,
        ]

    def train_step(self, data: Any) -> dict[str, Any]:
        data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            reconstruction_loss = keras.ops.mean(
                keras.ops.sum(
                    keras.losses.binary_crossentropy(data[..., None], reconstruction[..., None]),
                    axis=1,
                )
            )
            kl_loss = -0.5 * (1 + z_log_var - keras.ops.square(z_mean) - keras.ops.exp(z_log_var))
            kl_loss = keras.ops.mean(keras.ops.sum(kl_loss, axis=1))
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights, strict=True))
        self.total_loss_tracker.update_state(total_loss)
        self.reconstruction_loss_tracker.update_state(reconstruction_loss)
        self.kl_loss_tracker.update_state(kl_loss)
        return {
            "total_loss": self.total_loss_tracker.result(),
            "reconstruction_loss": self.reconstruction_loss_tracker.result(),
            "kl_loss": self.kl_loss_tracker.result(),
        }


def vae() -> keras.Model:
    """The VAE, compiled as keras.io does: `compile(optimizer=Adam())` and nothing else."""
    encoder_inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu")(encoder_inputs)
    z_mean = keras.layers.Dense(LATENT, name="z_mean")(hidden)
    z_log_var = keras.layers.Dense(LATENT, name="z_log_var")(hidden)
    z = Sampling()([z_mean, z_log_var])
    encoder = keras.Model(encoder_inputs, [z_mean, z_log_var, z], name="encoder")
    latent_inputs = keras.Input((LATENT,))
    hidden = keras.layers.Dense(16, activation="relu")(latent_inputs)
    decoder_outputs = keras.layers.Dense(FEATURES, activation="sigmoid")(hidden)
    decoder = keras.Model(latent_inputs, decoder_outputs, name="decoder")
    model = VAE(encoder, decoder)
    model.compile(optimizer=keras.optimizers.Adam(0.01))
    return model


class GAN(keras.Model):
    """keras.io's `examples/generative/dcgan_overriding_train_step.py` (Keras 3), small.

    `compile(d_optimizer, g_optimizer, loss_fn)` of its own (`super().compile()` with no
    optimizer), noise from `keras.random` with the model's `SeedGenerator`, and `d_loss`
    and `g_loss` trackers. As in `VAE`, the step takes the features out of `(x, y)`.
    """

    def __init__(self, discriminator: keras.Model, generator: keras.Model, latent_dim: int):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer: Any, g_optimizer: Any, loss_fn: Any) -> None:  # type: ignore[override]
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self) -> list[Any]:
        return [self.d_loss_tracker, self.g_loss_tracker]

    def train_step(self, data: Any) -> dict[str, Any]:
        real_images, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        batch_size = keras.ops.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator
        )
        generated_images = self.generator(random_latent_vectors)
        combined_images = keras.ops.concatenate([generated_images, real_images], axis=0)
        labels = keras.ops.concatenate(
            [keras.ops.ones((batch_size, 1)), keras.ops.zeros((batch_size, 1))], axis=0
        )
        labels += 0.05 * keras.random.uniform(keras.ops.shape(labels), seed=self.seed_generator)
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
        misleading_labels = keras.ops.zeros((batch_size, 1))
        with tf.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights, strict=True))
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}


def gan() -> keras.Model:
    """The GAN compiled with two Adam optimizers and a logits loss, as keras.io does."""
    latent_dim = 4
    discriminator = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(16),
            keras.layers.LeakyReLU(negative_slope=0.2),
            keras.layers.Dense(1),
        ],
        name="discriminator",
    )
    generator = keras.Sequential(
        [
            keras.Input((latent_dim,)),
            keras.layers.Dense(16),
            keras.layers.LeakyReLU(negative_slope=0.2),
            keras.layers.Dense(FEATURES),
        ],
        name="generator",
    )
    model = GAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)
    model.compile(
        d_optimizer=keras.optimizers.Adam(learning_rate=0.003),
        g_optimizer=keras.optimizers.Adam(learning_rate=0.003),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return model


# -- outputs keyed by a dict's keys; preprocessing layers --------------------------------


def dict_outputs() -> keras.Model:
    """Outputs keyed `cls` and `aux` in a dict, the layers keeping Keras's own names."""
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    return keras.Model(
        inputs, {"cls": keras.layers.Dense(CLASSES)(hidden), "aux": keras.layers.Dense(1)(hidden)}
    )


def normalized(x_train: Any = None, data: str | None = None) -> keras.Model:
    """A `Normalization` layer adapted on the training features, then a classifier.

    Args:
        x_train: the features to adapt on. Defaults to `None`: the `x` array of the
            `.npz` file `data` (as `model._target_` from the command line).
        data: an `.npz` file. Defaults to `None`.
    """
    import numpy as np

    if x_train is None:
        x_train = np.load(str(data))["x"]
    norm = keras.layers.Normalization()
    norm.adapt(x_train)
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu")(norm(inputs))
    return keras.Model(inputs, keras.layers.Dense(CLASSES)(hidden))


WORDS = ["red", "green", "blue", "cyan", "magenta", "yellow"]


def text_lookup() -> keras.Model:
    """String features through a `StringLookup` (a fixed vocabulary) and an embedding."""
    inputs = keras.Input((2,), dtype="string")
    ids = keras.layers.StringLookup(vocabulary=WORDS)(inputs)
    embedded = keras.layers.Embedding(len(WORDS) + 1, 8)(ids)
    hidden = keras.layers.Dense(16, activation="relu")(keras.layers.Flatten()(embedded))
    return keras.Model(inputs, keras.layers.Dense(CLASSES)(hidden))
