"""keras.io `vision/knowledge_distillation` (Keras 3): a Distiller with its own `compile`
(student and distillation losses, alpha, temperature), its own `compute_loss` calling the
teacher, `call` returning the student's output; `fit(x, y)` then `evaluate(x, y)`."""

import keras
import numpy as np
from keras import layers, ops

FIT_KWARGS = {"epochs": 2, "batch_size": 32, "shuffle": False}
COMPARE = "weights"
EVALUATE = True


class Distiller(keras.Model):
    def __init__(self, student, teacher):
        super().__init__()
        self.teacher = teacher
        self.student = student

    def compile(
        self,
        optimizer,
        metrics,
        student_loss_fn,
        distillation_loss_fn,
        alpha=0.1,
        temperature=3,
    ):
        super().compile(optimizer=optimizer, metrics=metrics)
        self.student_loss_fn = student_loss_fn
        self.distillation_loss_fn = distillation_loss_fn
        self.alpha = alpha
        self.temperature = temperature

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, allow_empty=False):
        teacher_pred = self.teacher(x, training=False)
        student_loss = self.student_loss_fn(y, y_pred)
        distillation_loss = self.distillation_loss_fn(
            ops.softmax(teacher_pred / self.temperature, axis=1),
            ops.softmax(y_pred / self.temperature, axis=1),
        ) * (self.temperature**2)
        return self.alpha * student_loss + (1 - self.alpha) * distillation_loss

    def call(self, x):
        return self.student(x)


def _mnist(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, size=n)
    x = rng.normal(size=(n, 14, 14, 1)).astype("float32")
    x[np.arange(n), y, :, 0] += 2.0
    return x, y


def make_data(seed):
    x, y = _mnist(192, seed)
    return {"x": x, "y": y}


def make_test_data(seed):
    return _mnist(64, seed)


def make_model():
    keras.utils.set_random_seed(1)
    teacher = keras.Sequential(
        [
            keras.Input(shape=(14, 14, 1)),
            layers.Conv2D(16, (3, 3), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Flatten(),
            layers.Dense(10),
        ],
        name="teacher",
    )
    student = keras.Sequential(
        [
            keras.Input(shape=(14, 14, 1)),
            layers.Conv2D(4, (3, 3), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Flatten(),
            layers.Dense(10),
        ],
        name="student",
    )
    distiller = Distiller(student=student, teacher=teacher)
    distiller.compile(
        optimizer=keras.optimizers.Adam(),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
        student_loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        distillation_loss_fn=keras.losses.KLDivergence(),
        alpha=0.1,
        temperature=10,
    )
    return distiller
