"""keras.io's callbacks docs: `ReduceLROnPlateau(monitor="val_loss", factor=0.5,
patience=1)` with `EarlyStopping`: the learning rate is halved when the validation loss
stops improving (noisy labels, a high rate), and `learning_rate` appears in the logs."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 6, "batch_size": 16, "shuffle": False}
COMPARE = "weights"


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(80, 8)).astype("float32")
    xv = rng.normal(size=(32, 8)).astype("float32")
    return {
        "x": x,
        "y": rng.integers(0, 3, size=80),
        "validation_data": (xv, rng.integers(0, 3, size=32)),
    }


def make_callbacks():
    return [
        keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1),
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=3),
    ]


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(3)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def check(reference, ours):
    lr = float(keras.ops.convert_to_numpy(reference.model.optimizer.learning_rate))
    assert lr < 0.05, "the reference never reduced its learning rate"
    mine = float(keras.ops.convert_to_numpy(ours.model.optimizer.learning_rate))
    assert abs(mine - lr) < 1e-9, f"learning rate {mine}, fit's {lr}"
