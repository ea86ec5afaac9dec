"""keras-tuner's "tune model training" guide: a `HyperModel` whose `build(hp)` tunes the
units and whose `fit(self, hp, model, *args, **kwargs)` tunes the batch size
(`batch_size=hp.Choice("batch_size", [16, 32])`), searched with random search over 2
trials, `epochs=2`, `validation_data` (issue 37 item 7).

Compared by what the user can see: `fit` was called once per trial, each trial trained
`epochs * ceil(examples / batch_size)` steps at its own batch size, and the best
hyperparameters hold the batch size (kdist's search may draw other values than
keras-tuner's)."""

import math

import keras
import keras_tuner
import numpy as np
from harness import BASE, Outcome

EXAMPLES, EPOCHS, TRIALS = 100, 2, 2
COMPARE = "custom"
# Its user code is a keras-tuner search (a fit per trial, at batch sizes the two searches
# draw independently), not one fit: no callback trace to set side by side.
TRACE = False
CALLS: list[dict] = []


class MyHyperModel(keras_tuner.HyperModel):
    def build(self, hp):
        model = keras.Sequential(
            [
                keras.Input((8,)),
                keras.layers.Dense(hp.Int("units", 8, 16, step=8), activation="relu"),
                keras.layers.Dense(3, activation="softmax"),
            ]
        )
        model.compile(
            optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"]
        )
        return model

    def fit(self, hp, model, *args, **kwargs):
        batch_size = hp.Choice("batch_size", [16, 32])
        history = model.fit(*args, batch_size=batch_size, **kwargs)
        CALLS.append(
            {
                "batch_size": batch_size,
                "steps": int(model.optimizer.iterations.numpy()),
                "loss": list(history.history["loss"]),
            }
        )
        return history


def make_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(EXAMPLES, 8)).astype("float32")
    xv = rng.normal(size=(32, 8)).astype("float32")
    return {
        "x": x,
        "y": x[:, :3].argmax(1),
        "validation_data": (xv, xv[:, :3].argmax(1)),
    }


def _outcome(tuner) -> Outcome:
    calls = list(CALLS)
    best = tuner.get_best_hyperparameters()[0].values
    history = {"loss": calls[-1]["loss"]} if calls else {}
    return Outcome(None, history, extra={"calls": calls, "best": best})


def run_keras(tmp_path):
    CALLS.clear()
    keras.utils.set_random_seed(1)
    tuner = keras_tuner.RandomSearch(
        MyHyperModel(),
        objective="val_accuracy",
        max_trials=TRIALS,
        seed=1,
        directory=str(tmp_path),
        project_name="tune_hypermodel",
    )
    tuner.search(**make_data(0), epochs=EPOCHS, verbose=0)
    return _outcome(tuner)


def run_kdist(tmp_path, overrides):
    import kdist.tune

    CALLS.clear()
    keras.utils.set_random_seed(1)
    strategy = next(o.split("=", 1)[1] for o in overrides if o.startswith("strategy="))
    tuner = kdist.tune.search(
        MyHyperModel(),
        **make_data(0),
        objective="val_accuracy",
        max_trials=TRIALS,
        epochs=EPOCHS,
        strategy=strategy,
        directory=tmp_path / "search",
        overrides=BASE,
    )
    return _outcome(tuner)


def check(reference, ours):
    for side, outcome in (("keras-tuner", reference), ("kdist", ours)):
        calls = outcome.extra["calls"]
        assert len(calls) == TRIALS, (
            f"{side}: HyperModel.fit called {len(calls)} times in {TRIALS} trials"
        )
        for call in calls:
            steps = EPOCHS * math.ceil(EXAMPLES / call["batch_size"])
            assert call["steps"] == steps, f"{side}: {call}, not {steps} steps"
        best = outcome.extra["best"]
        assert best.get("batch_size") in (16, 32), f"{side}: best hyperparameters {best}"
