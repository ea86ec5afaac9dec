"""keras.io's "writing your own callbacks" guide: a LossHistory callback that records the
loss at every `on_train_batch_end`, and the guide's CustomLearningRateScheduler
(`on_epoch_begin` sets the optimizer's learning rate from a schedule)."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 3, "batch_size": 32, "shuffle": False}
COMPARE = "weights"
LR_SCHEDULE = [(0, 0.05), (1, 0.02), (2, 0.005)]


class LossHistory(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.per_batch_losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.per_batch_losses.append(logs.get("loss"))


class CustomLearningRateScheduler(keras.callbacks.Callback):
    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_epoch_begin(self, epoch, logs=None):
        lr = self.model.optimizer.learning_rate
        scheduled_lr = self.schedule(epoch, float(lr.numpy()))
        self.model.optimizer.learning_rate = scheduled_lr


def lr_schedule(epoch, lr):
    for start, rate in LR_SCHEDULE:
        if epoch == start:
            return rate
    return lr


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(192, 16)).astype("float32")
    return {"x": x, "y": (x @ rng.normal(size=(16, 1))).astype("float32")}


def make_callbacks():
    return [LossHistory(), CustomLearningRateScheduler(lr_schedule)]


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.1), loss="mse", metrics=["mae"]
    )
    return model


def check(reference, ours):
    steps = len(reference.callbacks[0].per_batch_losses)
    seen = ours.callbacks[0].per_batch_losses
    # Issue 37 item 10: kdist's steps_per_execution (8 by default) calls batch hooks once
    # per execution, which its README states; every call it makes carries a finite loss.
    assert seen and all(np.isfinite(v) for v in seen), seen
    assert len(seen) <= steps
    lr = float(ours.model.optimizer.learning_rate.numpy())
    assert abs(lr - LR_SCHEDULE[-1][1]) < 1e-9, lr
