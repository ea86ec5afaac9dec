"""keras.io `vision/semisupervised_simclr`: a ContrastiveModel with augmenters
(RandomFlip, RandomTranslation, RandomZoom), an encoder, a projection head and a linear
probe, its own `compile(contrastive_optimizer, probe_optimizer)` and `train_step` on a
zipped dataset `((unlabeled_images, _), (labeled_images, labels))`, NT-Xent loss."""

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

TEMPERATURE, WIDTH = 0.1, 16
FIT_KWARGS = {"epochs": 2}
COMPARE = "weights"
LOSS_KEY = "c_loss"
# Keras's own fit cannot build a model with no `call` under a strategy ("Unable to
# automatically build the model"); kdist builds it on one device through its train_step,
# and under mirrored refuses it before training, in one line, on purpose (issue 43).
KDIST_MIRRORED_REFUSAL = r"no `call`"


def get_augmenter(seed):
    return keras.Sequential(
        [
            layers.RandomFlip("horizontal", seed=seed),
            layers.RandomTranslation(0.2, 0.2, seed=seed + 1),
            layers.RandomZoom((-0.2, 0.0), seed=seed + 2),
        ]
    )


def get_encoder():
    return keras.Sequential(
        [
            keras.Input((16, 16, 3)),
            layers.Conv2D(WIDTH, kernel_size=3, strides=2, activation="relu"),
            layers.Conv2D(WIDTH, kernel_size=3, strides=2, activation="relu"),
            layers.Flatten(),
            layers.Dense(WIDTH, activation="relu"),
        ],
        name="encoder",
    )


class ContrastiveModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.contrastive_augmenter = get_augmenter(10)
        self.classification_augmenter = get_augmenter(20)
        self.encoder = get_encoder()
        self.projection_head = keras.Sequential(
            [keras.Input((WIDTH,)), layers.Dense(WIDTH, activation="relu"), layers.Dense(WIDTH)],
            name="projection_head",
        )
        self.linear_probe = keras.Sequential(
            [layers.Input((WIDTH,)), layers.Dense(3)], name="linear_probe"
        )

    def compile(self, contrastive_optimizer, probe_optimizer, **kwargs):
        super().compile(**kwargs)
        self.contrastive_optimizer = contrastive_optimizer
        self.probe_optimizer = probe_optimizer
        self.probe_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.contrastive_loss_tracker = keras.metrics.Mean(name="c_loss")
        self.probe_loss_tracker = keras.metrics.Mean(name="p_loss")
        self.probe_accuracy = keras.metrics.SparseCategoricalAccuracy(name="p_acc")

    @property
    def metrics(self):
        return [self.contrastive_loss_tracker, self.probe_loss_tracker, self.probe_accuracy]

    def contrastive_loss(self, projections_1, projections_2):
        projections_1 = ops.normalize(projections_1, axis=1)
        projections_2 = ops.normalize(projections_2, axis=1)
        similarities = ops.matmul(projections_1, ops.transpose(projections_2)) / TEMPERATURE
        batch_size = ops.shape(projections_1)[0]
        contrastive_labels = ops.arange(batch_size)
        loss_1_2 = keras.losses.sparse_categorical_crossentropy(
            contrastive_labels, similarities, from_logits=True
        )
        loss_2_1 = keras.losses.sparse_categorical_crossentropy(
            contrastive_labels, ops.transpose(similarities), from_logits=True
        )
        return (loss_1_2 + loss_2_1) / 2

    def train_step(self, data):
        (unlabeled_images, _), (labeled_images, labels) = data
        images = ops.concatenate((unlabeled_images, labeled_images), axis=0)
        augmented_images_1 = self.contrastive_augmenter(images, training=True)
        augmented_images_2 = self.contrastive_augmenter(images, training=True)
        with tf.GradientTape() as tape:
            features_1 = self.encoder(augmented_images_1, training=True)
            features_2 = self.encoder(augmented_images_2, training=True)
            projections_1 = self.projection_head(features_1, training=True)
            projections_2 = self.projection_head(features_2, training=True)
            contrastive_loss = self.contrastive_loss(projections_1, projections_2)
        variables = self.encoder.trainable_weights + self.projection_head.trainable_weights
        gradients = tape.gradient(contrastive_loss, variables)
        self.contrastive_optimizer.apply_gradients(zip(gradients, variables, strict=True))
        self.contrastive_loss_tracker.update_state(contrastive_loss)
        preprocessed_images = self.classification_augmenter(labeled_images, training=True)
        with tf.GradientTape() as tape:
            features = self.encoder(preprocessed_images, training=False)
            class_logits = self.linear_probe(features, training=True)
            probe_loss = self.probe_loss(labels, class_logits)
        gradients = tape.gradient(probe_loss, self.linear_probe.trainable_weights)
        self.probe_optimizer.apply_gradients(
            zip(gradients, self.linear_probe.trainable_weights, strict=True)
        )
        self.probe_loss_tracker.update_state(probe_loss)
        self.probe_accuracy.update_state(labels, class_logits)
        return {m.name: m.result() for m in self.metrics}


def make_data(seed):
    rng = np.random.default_rng(seed)
    unlabeled = rng.uniform(size=(128, 16, 16, 3)).astype("float32")
    labeled = rng.uniform(size=(64, 16, 16, 3)).astype("float32")
    labels = rng.integers(0, 3, size=64)
    unlabeled_ds = tf.data.Dataset.from_tensor_slices((unlabeled, np.full(128, -1))).batch(16)
    labeled_ds = tf.data.Dataset.from_tensor_slices((labeled, labels)).batch(8)
    return {"x": tf.data.Dataset.zip((unlabeled_ds, labeled_ds))}


def make_model():
    keras.utils.set_random_seed(1)
    model = ContrastiveModel()
    model.compile(
        contrastive_optimizer=keras.optimizers.Adam(),
        probe_optimizer=keras.optimizers.Adam(),
    )
    return model
