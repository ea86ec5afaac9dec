"""Nothing of Keras's training API is silently ignored (issue 42): the table in
`kdist.experiment.keras_surface` against Keras's own signatures, read at test time.

A Keras upgrade that adds a parameter or a callback hook fails
`test_every_keras_parameter_and_hook_is_in_the_table` until the table says what kdist
does with it. The honoured optimizer and compile options train as `model.fit` does (one
device, weights within 1e-6); refused ones are refused in one line through `exp.fit`.
Cost: ~1 s for the table tests, ~2 s an optimizer case.
"""

from __future__ import annotations

import inspect
import logging
import re
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest

import kdist
from kdist.config.errors import ConfigError
from kdist.experiment.keras_surface import BEGIN, END, REFUSED, SURFACE, render

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guides" / "notebook.md"
BASE = ["trainer.verbose=0", "callbacks=minimal", "strategy=one_device"]
RNG = np.random.default_rng(0)
X = RNG.normal(size=(64, 8)).astype("float32")
Y = RNG.integers(0, 3, 64)
SPARSE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _parameters(function: Any) -> set[str]:
    return {name for name in inspect.signature(function).parameters if name != "self"}


def _optimizer_parameters() -> set[str]:
    """`keras.optimizers.Optimizer.__init__`'s parameters: the backend's class takes
    `*args, **kwargs` and hands them to the first base that names them."""
    for cls in keras.optimizers.Optimizer.__mro__:
        named = _parameters(cls.__init__) - {"args"}
        if "learning_rate" in named:
            return named
    raise AssertionError("no base of keras.optimizers.Optimizer names learning_rate")


def keras_surface() -> dict[str, set[str]]:
    hooks = {name for name in dir(keras.callbacks.Callback) if name.startswith("on_")}
    return {
        "fit": _parameters(keras.Model.fit),
        "evaluate": _parameters(keras.Model.evaluate),
        "predict": _parameters(keras.Model.predict),
        "compile": _parameters(keras.Model.compile),
        "Optimizer": _optimizer_parameters(),
        "Callback": hooks,
    }


def test_every_keras_parameter_and_hook_is_in_the_table():
    names = [entry.name for entry in SURFACE]
    assert len(names) == len(set(names)), "an entry is listed twice"
    listed: dict[str, set[str]] = {}
    for name in names:
        where, _, parameter = name.partition(".")
        listed.setdefault(where, set()).add(parameter)
    for where, parameters in keras_surface().items():
        missing = sorted(parameters - listed.get(where, set()))
        assert not missing, (
            f"Keras's {where} has {missing}: say in keras_surface.py what kdist does"
        )
        stale = sorted(listed.get(where, set()) - parameters)
        assert not stale, f"keras_surface.py lists {where} {stale}, which Keras does not have"
    assert {entry.status for entry in SURFACE} <= {"honoured", "refused", "display only"}


def test_each_named_test_exists():
    for entry in SURFACE:
        path, _, test = entry.test.partition("::")
        source = ROOT / path
        assert source.is_file(), f"{entry.name}: {path} does not exist"
        assert re.search(rf"^def {re.escape(test)}\(", source.read_text(), re.M), (
            f"{entry.name}: {entry.test} does not exist"
        )
        if entry.status == REFUSED:
            assert entry.note, f"{entry.name}: a refusal states its message"


def test_the_notebook_guide_shows_the_current_table():
    text = PAGE.read_text()
    assert BEGIN in text and END in text
    shown = BEGIN + text.partition(BEGIN)[2].partition(END)[0] + END
    assert shown == render(), "run: python -m kdist.experiment.keras_surface"


def _model(**compile_args: Any) -> keras.Model:
    keras.utils.set_random_seed(5)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)]
    )
    compile_args.setdefault("optimizer", keras.optimizers.SGD(0.1))
    compile_args.setdefault("loss", SPARSE)
    model.compile(**compile_args)
    return model


def _experiment(tmp_path: Path) -> kdist.Experiment:
    return kdist.Experiment(kdist.compose(BASE), run_dir=tmp_path)


def _trains_as_fit(tmp_path: Path, make: Any, *, sample_weight: Any = None) -> Any:
    exp = _experiment(tmp_path)
    with exp.strategy.scope():
        reference, model = make(), make()
    exp.build_model(model=model)
    args = {"batch_size": 16, "epochs": 2, "shuffle": False, "sample_weight": sample_weight}
    expected = reference.fit(X, Y, verbose=0, **args)
    history = exp.fit(X, Y, **args)
    pairs = zip(exp.model.get_weights(), reference.get_weights(), strict=True)
    assert max(float(np.abs(a - b).max()) for a, b in pairs) <= 1e-6
    return history, expected


OPTIMIZER_CASES = {
    "clipnorm": {"clipnorm": 0.05},
    "clipvalue": {"clipvalue": 0.01},
    "global_clipnorm": {"global_clipnorm": 0.05},
    "weight_decay": {"weight_decay": 0.5},
    "ema": {"use_ema": True, "ema_momentum": 0.8, "ema_overwrite_frequency": 3},
    "loss_scale_factor": {"loss_scale_factor": 8.0, "name": "scaled", "learning_rate": 0.05},
}


@pytest.mark.parametrize("case", list(OPTIMIZER_CASES))
def test_optimizer_options_train_as_fit(tmp_path: Path, case: str):
    options = OPTIMIZER_CASES[case]
    _trains_as_fit(tmp_path, lambda: _model(optimizer=keras.optimizers.Adam(**options)))


def test_compile_options_train_as_fit(tmp_path: Path):
    weights = RNG.uniform(0.5, 2.0, size=64).astype("float32")

    def make() -> keras.Model:
        return _model(
            loss_weights=0.5,
            metrics=["accuracy"],
            weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="w_acc")],
            auto_scale_loss=False,
        )

    history, expected = _trains_as_fit(tmp_path, make, sample_weight=weights)
    assert set(history.history) == set(expected.history)
    np.testing.assert_allclose(history.history["w_acc"], expected.history["w_acc"], rtol=1e-6)


def test_refused_parameters_are_refused_in_one_line(tmp_path: Path):
    exp = _experiment(tmp_path)
    with exp.strategy.scope():
        exp.build_model(model=_model())
    for name, value in (("validation_batch_size", 0), ("validation_steps", -1)):
        with pytest.raises(ConfigError, match=name) as error:
            exp.fit(X, Y, validation_data=(X, Y), **{name: value})
        assert "\n" not in str(error.value)
    with pytest.raises(TypeError, match="unexpected keyword argument") as wrong:
        exp.evaluate(X, Y, use_cached_eval_dataset=True)  # type: ignore[call-arg]
    assert "\n" not in str(wrong.value)
    assert int(exp.model.optimizer.iterations.numpy()) == 0  # before any training


class _Hooks(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def on_test_begin(self, logs: Any = None) -> None:
        self.calls.append("on_test_begin")

    def on_test_end(self, logs: Any = None) -> None:
        self.calls.append("on_test_end")

    def on_predict_begin(self, logs: Any = None) -> None:
        self.calls.append("on_predict_begin")

    def on_predict_end(self, logs: Any = None) -> None:
        self.calls.append("on_predict_end")

    def on_predict_batch_end(self, batch: int, logs: Any = None) -> None:
        self.calls.append("on_predict_batch_end")


def test_display_only_parameters_change_no_result(tmp_path: Path, caplog: Any):
    exp = _experiment(tmp_path)
    with exp.strategy.scope():
        reference, model = _model(metrics=["accuracy"]), _model(metrics=["accuracy"])
    exp.build_model(model=model)
    reference.fit(X, Y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    exp.fit(X, Y, batch_size=16, epochs=1, shuffle=False)  # binds the model to this data
    hooks, keras_hooks = _Hooks(), _Hooks()
    quiet = exp.evaluate(X, Y, verbose=0, return_dict=True)
    loud = exp.evaluate(X, Y, verbose=1, return_dict=True, callbacks=[hooks])
    assert quiet == loud == pytest.approx(reference.evaluate(X, Y, verbose=0, return_dict=True))
    with caplog.at_level(logging.WARNING, logger="kdist.experiment.results"):
        shown = exp.predict(X, verbose=1, callbacks=[hooks])
    np.testing.assert_allclose(exp.predict(X, verbose=0), shown)
    expected = reference.predict(X, verbose=0, callbacks=[keras_hooks])
    np.testing.assert_allclose(shown, expected, rtol=1e-6, atol=1e-6)
    # Keras's predict calls the predict-batch hooks once a batch (issue 50): so does kdist's.
    assert keras_hooks.calls.count("on_predict_batch_end") > 1
    assert hooks.calls == ["on_test_begin", "on_test_end", *keras_hooks.calls]
    assert not [r for r in caplog.records if "are not called by predict" in r.getMessage()]
