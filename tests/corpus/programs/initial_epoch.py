"""keras.io's "resume training" habit: `fit(epochs=4, initial_epoch=2)` trains epochs 2
and 3; `History.epoch`, every callback's epoch index and a `LearningRateScheduler` see 2
and 3 (issue 42 item 3: kdist counted them 0 and 1)."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 4, "initial_epoch": 2, "batch_size": 16, "shuffle": False}
COMPARE = "weights"


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(64, 8)).astype("float32")
    return {"x": x, "y": (x @ rng.normal(size=(8, 1))).astype("float32")}


def schedule(epoch, lr):
    return 0.1 / (1 + epoch)  # epoch 2: 0.033, epoch 3: 0.025


def make_callbacks():
    return [keras.callbacks.LearningRateScheduler(schedule)]


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model


def check(reference, ours):
    # The epoch indexes themselves are judged by the callback trace (on_epoch_begin(2), (3)).
    assert len(ours.history["loss"]) == len(reference.history["loss"]) == 2, ours.history
    lr = float(keras.ops.convert_to_numpy(ours.model.optimizer.learning_rate))
    assert abs(lr - schedule(3, None)) < 1e-7, f"learning rate {lr}, scheduled for epoch 3: 0.025"
