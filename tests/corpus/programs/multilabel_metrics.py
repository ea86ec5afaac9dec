"""keras.io `nlp/multi_label_classification`: sigmoid outputs over 4 labels,
`binary_crossentropy`, and the metrics a user adds: `AUC(multi_label=True)`, `Precision`,
`Recall`, `F1Score(average="micro", threshold=0.5)`, with `weighted_metrics` and a
`sample_weight`; validation data with its own weights."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 3, "batch_size": 16, "shuffle": False}
COMPARE = "weights"
EVALUATE = True


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 12)).astype("float32")
    y = (x[:, :4] + 0.3 * rng.normal(size=(n, 4)) > 0).astype("float32")
    return x, y


def make_data(seed):
    x, y = _data(112, seed)
    rng = np.random.default_rng(seed + 5)
    xv, yv = _data(32, seed + 1)
    return {
        "x": x,
        "y": y,
        "sample_weight": rng.uniform(0.5, 2.0, size=112).astype("float32"),
        "validation_data": (xv, yv, rng.uniform(0.5, 2.0, size=32).astype("float32")),
    }


def make_test_data(seed):
    return _data(32, seed)


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((12,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(4, activation="sigmoid"),
        ]
    )
    model.compile(
        optimizer="adam",
        loss="binary_crossentropy",
        metrics=[
            keras.metrics.AUC(multi_label=True, name="auc"),
            keras.metrics.Precision(name="precision"),
            keras.metrics.Recall(name="recall"),
            keras.metrics.F1Score(average="micro", threshold=0.5, name="f1"),
        ],
        weighted_metrics=["binary_accuracy"],
    )
    return model
