"""The plain Keras script the start-up benchmark compares `python -m kdist.train` with.

kdist's default job without kdist: scikit-learn's 8x8 digits (80% for training), the
same MLP (flatten, dense 128 relu, dense 10 logits), Adam, batch 64, 8 steps per
execution, one epoch of `model.fit`. It prints the probe line when the first call of
the train function has finished, as `benchmarks.probes.FirstStepMarker` does in kdist.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
from sklearn.datasets import load_digits

from benchmarks.probes import FirstStepMarker

__all__: list[str] = []


def main() -> None:
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    order = np.random.RandomState(0).permutation(len(x))
    train = order[round(len(x) * 0.2) :]
    keras.utils.set_random_seed(42)
    model = keras.Sequential(
        [
            keras.Input(shape=(8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=8,
    )
    model.fit(x[train], y[train], batch_size=64, epochs=1, verbose=0, callbacks=[FirstStepMarker()])


if __name__ == "__main__":
    main()
