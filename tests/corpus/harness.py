"""Train one corpus program twice, with Keras's `model.fit` and with kdist, and compare.

A program (a module of `programs/`) is written as keras.io writes it, with a small uniform
interface:

- `make_data(seed)`: the data arguments of `fit` (`x`, `y`, `sample_weight`,
  `validation_data`, ...), made anew for each side (a dataset or a generator is read once).
- `make_model()`: the model, compiled (or with its own `compile`), seeded with
  `keras.utils.set_random_seed` so that both sides start from the same weights.
- `FIT_KWARGS`: the other `fit` arguments (epochs, batch_size, shuffle, callbacks are made
  by `make_callbacks()` where the program has some).
- `COMPARE`: `"weights"` (the final weights within `TOLERANCE`, 1e-5 by default) or
  `"loss"` (the history's `LOSS_KEY` per epoch within `TOLERANCE`, stated in the program).
- optional `make_test_data(seed)` with `EVALUATE`/`PREDICT`: `evaluate(x, y)` and
  `predict(x)` on both sides, equal within `EVAL_TOLERANCE`.
- optional `check(reference, ours)`: more assertions on the two `Outcome`s.
- optional `WARNINGS`: warning filters the program needs (Keras's own warnings about it).
- optional `run_keras(tmp_path)`, `run_kdist(tmp_path, overrides)`: programs whose user
  code is not `fit` itself (a keras-tuner search).
- optional `TRACE`: `False` with a comment saying why where the program's user code is
  not one `fit` call (a search); `TRACE_TOLERANCE`: the logs' values in the callback trace
  within this (1e-4 by default; the program's `TOLERANCE` when it compares losses).
- optional `KERAS_MIRRORED_FAILS`: why Keras's own `fit` cannot run the program under
  `MirroredStrategy` (the check asserts it still cannot, then that kdist trains);
  `KDIST_MIRRORED_REFUSAL`: the regex of the one line kdist refuses it with under mirrored.

Every `fit` of both sides gets a `TraceRecorder` after the program's callbacks: each
callback call (hook, epoch or batch index, the logs' keys and values) is recorded, and the
two traces must be equal (`compare_traces`), batch hooks as the model's
`steps_per_execution` batches them in Keras.

The reference runs `model.fit` on one device with no strategy scope (or, for the mirrored
check, inside `tf.distribute.MirroredStrategy` over the 2 logical CPUs). kdist's side is the
notebook API: `Experiment(cfg)`, the model made inside `exp.strategy.scope()`,
`exp.build_model(model=m)`, `exp.fit(**same arguments)`.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import keras
import numpy as np

LOGICAL = "runtime.logical_devices=2"
SEED = 0
# The overrides every kdist side uses: nothing written but the essentials, no progress bar.
BASE = [LOGICAL, "callbacks=minimal", "trainer.verbose=0"]

# name -> {"one_device": "pass" | "fail: ...", "mirrored": ...}; read by conftest's summary.
RESULTS: dict[str, dict[str, str]] = {}
# name -> the mirrored check's judge: "keras" (Keras's fit under MirroredStrategy),
# "trains" (Keras's fit cannot run it: KERAS_MIRRORED_FAILS) or "refusal".
MIRRORED_JUDGE: dict[str, str] = {}
# The hooks of `keras.callbacks.Callback` the recorder traces (`on_batch_*` are the
# train hooks' aliases in Keras and are not called by `fit` on their own).
HOOKS = (
    "on_train_begin",
    "on_train_end",
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_test_begin",
    "on_test_end",
    "on_test_batch_begin",
    "on_test_batch_end",
    "on_predict_begin",
    "on_predict_end",
    "on_predict_batch_begin",
    "on_predict_batch_end",
)


def _plain(value: Any) -> Any:
    array = np.asarray(value)
    if array.dtype.kind in "fiub":
        return float(array) if array.ndim == 0 else array.astype("float64")
    return repr(value)


class TraceRecorder(keras.callbacks.Callback):
    """Records every callback call: `(hook, index, {key: value})`, index the epoch or
    batch number (None for begin/end hooks), values as Python floats (arrays kept)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int | None, dict[str, Any]]] = []

    def _record(self, hook: str, index: int | None, logs: Any) -> None:
        logs = dict(logs or {})
        self.calls.append((hook, index, {k: _plain(v) for k, v in sorted(logs.items())}))


def _hook(name: str, indexed: bool) -> Callable[..., None]:
    if indexed:

        def method(self: TraceRecorder, index: int, logs: Any = None) -> None:
            self._record(name, int(index), logs)
    else:

        def method(self: TraceRecorder, logs: Any = None) -> None:
            self._record(name, None, logs)

    method.__name__ = name
    return method


for _name in HOOKS:
    setattr(TraceRecorder, _name, _hook(_name, "batch" in _name or "epoch" in _name))


def _describe(call: tuple[str, int | None, dict[str, Any]] | None) -> str:
    if call is None:
        return "nothing"
    hook, index, logs = call
    values = ", ".join(
        f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v!r}"[:60] for k, v in logs.items()
    )
    where = "" if index is None else f"{index}, "
    return f"{hook}({where}{{{values}}})"


def _counts(calls: Sequence[tuple[str, int | None, dict[str, Any]]]) -> str:
    counted: dict[str, int] = {}
    for hook, _, _ in calls:
        counted[hook] = counted.get(hook, 0) + 1
    return ", ".join(f"{h} x{n}" for h, n in counted.items())


def compare_traces(
    reference: list, ours: list, tolerance: float, who: str = "fit", batch_values: bool = True
) -> str:
    """Assert the two callback traces are equal: the same hooks in the same order with the
    same indexes and log keys, every value within `tolerance` (absolute and relative).
    The message names the first call that differs and both sides' call counts."""

    def mismatch(i: int, why: str) -> AssertionError:
        a = ours[i] if i < len(ours) else None
        b = reference[i] if i < len(reference) else None
        return AssertionError(
            f"callback trace differs (kdist made {len(ours)} calls, {who} {len(reference)}), "
            f"first at call {i} ({why}): kdist {_describe(a)}, {who} {_describe(b)}; "
            f"kdist's calls: {_counts(ours)}; {who}'s: {_counts(reference)}"
        )

    for i in range(max(len(reference), len(ours))):
        if i >= len(ours) or i >= len(reference):
            raise mismatch(i, "one trace ended")
        (hook, index, logs), (ref_hook, ref_index, ref_logs) = ours[i], reference[i]
        if (hook, index) != (ref_hook, ref_index):
            raise mismatch(i, "hook or index")
        if sorted(logs) != sorted(ref_logs):
            raise mismatch(i, f"log keys {sorted(logs)} against {sorted(ref_logs)}")
        if not batch_values and "batch" in hook:
            continue  # the program's two sides draw other orders: batch logs differ
        for key, value in logs.items():
            ref_value = ref_logs[key]
            if isinstance(value, str) or isinstance(ref_value, str):
                same = value == ref_value
            else:
                a, b = np.asarray(value), np.asarray(ref_value)
                same = a.shape == b.shape and bool(
                    np.allclose(a, b, atol=tolerance, rtol=tolerance, equal_nan=True)
                )
            if not same:
                raise mismatch(i, f"{key!r} beyond {tolerance:g}")
    return f"trace of {len(reference)} calls equal"


def trace_tolerance(program: ModuleType) -> float:
    if hasattr(program, "TRACE_TOLERANCE"):
        return float(program.TRACE_TOLERANCE)
    if getattr(program, "COMPARE", "weights") == "loss":
        return float(getattr(program, "TOLERANCE", 1e-5))
    return 1e-4


def program_names() -> list[str]:
    """Every program module of `programs/`, sorted."""
    package = importlib.import_module("programs")
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__))


def load(name: str) -> ModuleType:
    return importlib.import_module(f"programs.{name}")


@dataclass
class Outcome:
    """What one side's training left: the model, its history and anything a check needs."""

    model: keras.Model | None
    history: dict[str, list[float]]
    evaluated: Any = None
    predicted: Any = None
    callbacks: list[Any] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@contextmanager
def program_warnings(program: ModuleType) -> Iterator[None]:
    """Ignore the warnings the program lists in `WARNINGS` (`(message regex, category)`):
    Keras's own warnings about the way keras.io writes it."""
    with warnings.catch_warnings():
        # Keras's `fit` says this of every dataset when `shuffle` keeps its default (True).
        warnings.filterwarnings("ignore", message="`shuffle=True` was passed", category=UserWarning)
        for message, category in getattr(program, "WARNINGS", ()):
            warnings.filterwarnings("ignore", message=message, category=category)
        yield


def _fit_arguments(program: ModuleType) -> tuple[dict[str, Any], list[Any]]:
    """`fit`'s keyword arguments for one side: the data (fresh), FIT_KWARGS, callbacks."""
    data = program.make_data(SEED)
    callbacks = list(program.make_callbacks()) if hasattr(program, "make_callbacks") else []
    kwargs = {**data, **getattr(program, "FIT_KWARGS", {})}
    # The recorder comes last, so it sees the logs as the program's callbacks left them.
    kwargs["callbacks"] = [*callbacks, TraceRecorder()]
    return kwargs, callbacks


def _trace(kwargs: dict[str, Any]) -> list:
    return kwargs["callbacks"][-1].calls


def _evaluate_predict(program: ModuleType, evaluate: Callable, predict: Callable) -> tuple:
    if not (getattr(program, "EVALUATE", False) or getattr(program, "PREDICT", False)):
        return None, None
    x_test, y_test = program.make_test_data(SEED + 1)
    data = (x_test,) if y_test is None else (x_test, y_test)  # a dataset carries its y
    evaluated = evaluate(*data, verbose=0) if getattr(program, "EVALUATE", False) else None
    predicted = predict(x_test, verbose=0) if getattr(program, "PREDICT", False) else None
    return evaluated, predicted


def _chdir(tmp_path: Path) -> Any:
    """Programs whose callbacks write files write them under their side's own folder."""
    import os

    tmp_path.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()

    @contextmanager
    def inside() -> Iterator[None]:
        os.chdir(tmp_path)
        try:
            yield
        finally:
            os.chdir(here)

    return inside()


def mirrored_strategy() -> Any:
    """Keras's own judge under mirrored: `tf.distribute.MirroredStrategy` over the 2 logical
    CPUs that tests/conftest.py makes, TensorFlow's default all-reduce.

    Made through kdist's `mirrored()` only for its collective-key bookkeeping: every
    MirroredStrategy of a process starts its collective keys at the same base, so the
    second one's all-reduce fails ("Detected at node .../CollectiveReduceV2") unless the
    base moves, as kdist moves it for each strategy it makes (its own runs included).
    """
    from kdist.strategies.single_host import mirrored

    return mirrored(devices=["/cpu:0", "/cpu:1"])


def run_keras(program: ModuleType, tmp_path: Path, strategy: Any = None) -> Outcome:
    """The reference: `model.fit` on one device (or inside `strategy.scope()`), as the
    program's author runs it."""
    if hasattr(program, "run_keras"):
        return program.run_keras(tmp_path)
    with _chdir(tmp_path):
        kwargs, callbacks = _fit_arguments(program)
        if strategy is None:
            model = program.make_model()
        else:
            with strategy.scope():
                model = program.make_model()
        if hasattr(program, "fit_keras"):  # a program with more than one fit (two phases)
            history = program.fit_keras(model, kwargs)
        else:
            history = model.fit(verbose=0, **kwargs)
        evaluated, predicted = _evaluate_predict(program, model.evaluate, model.predict)
    outcome = Outcome(model, dict(history.history), evaluated, predicted, callbacks)
    outcome.extra["trace"] = _trace(kwargs)
    outcome.extra["folder"] = tmp_path
    return outcome


def run_kdist(program: ModuleType, tmp_path: Path, strategy: str) -> Outcome:
    """kdist's notebook API with the same arguments, under `strategy`."""
    import kdist

    overrides = [*BASE, f"strategy={strategy}", f"run_dir={tmp_path / 'run'}"]
    if hasattr(program, "run_kdist"):
        return program.run_kdist(tmp_path, overrides)
    with _chdir(tmp_path):
        kwargs, callbacks = _fit_arguments(program)
        exp = kdist.Experiment(kdist.compose(overrides))
        with exp.strategy.scope():
            model = program.make_model()
        exp.build_model(model=model)
        if hasattr(program, "fit_kdist"):  # a program with more than one fit (two phases)
            history = program.fit_kdist(exp, kwargs)
        else:
            history = exp.fit(verbose=0, **kwargs)
        outcome = Outcome(exp.model, dict(history.history), callbacks=callbacks)
        outcome.extra["experiment"] = exp
        outcome.extra["trace"] = _trace(kwargs)
        outcome.extra["folder"] = tmp_path
        try:
            outcome.evaluated, outcome.predicted = _evaluate_predict(
                program, exp.evaluate, exp.predict
            )
        except Exception as error:  # reported after the training's comparison (`raise_later`)
            outcome.extra["evaluate_error"] = error
    return outcome


def raise_later(ours: Outcome) -> None:
    """Raise what `evaluate`/`predict` raised, once training has been compared."""
    error = ours.extra.get("evaluate_error")
    if error is not None:
        raise error


def max_weight_diff(a: keras.Model, b: keras.Model) -> float:
    wa, wb = a.get_weights(), b.get_weights()
    assert len(wa) == len(wb), f"{len(wa)} weights against fit's {len(wb)}"
    diffs = []
    for i, (x, y) in enumerate(zip(wa, wb, strict=True)):
        assert np.shape(x) == np.shape(y), f"weight {i}: shape {np.shape(x)}, fit's {np.shape(y)}"
        diffs.append(float(np.max(np.abs(np.asarray(x) - np.asarray(y)), initial=0.0)))
    return max(diffs, default=0.0)


def _flat(value: Any) -> list[np.ndarray]:
    if isinstance(value, dict):
        return [np.asarray(value[k], dtype="float64") for k in sorted(value)]
    return [np.asarray(v, dtype="float64") for v in keras.tree.flatten(value)]


def compare(program: ModuleType, reference: Outcome, ours: Outcome, who: str = "fit") -> str:
    """Assert that `ours` trained as `reference` (weights or losses, then the callback
    trace, then `evaluate`/`predict` and the program's `check`); returns what was measured."""
    tolerance = float(getattr(program, "TOLERANCE", 1e-5))
    how = getattr(program, "COMPARE", "weights")
    measured = ""
    if how == "weights":
        diff = max_weight_diff(ours.model, reference.model)
        measured = f"max abs weight diff {diff:.2e}"
        assert diff <= tolerance, f"{measured} > {tolerance:g}"
    elif how == "loss":
        key = getattr(program, "LOSS_KEY", "loss")
        a, b = ours.history.get(key), reference.history[key]
        assert a is not None, f"history has no {key!r}: {sorted(ours.history)}"
        assert len(a) == len(b), f"{len(a)} epochs of {key!r}, fit's {len(b)}"
        diff = float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        measured = f"max abs {key} diff {diff:.2e} over {len(b)} epochs"
        assert diff <= tolerance, f"{measured} > {tolerance:g}"
    elif how != "custom":
        raise ValueError(f"COMPARE={how!r}")
    if getattr(program, "TRACE", True):
        traced = compare_traces(
            reference.extra["trace"],
            ours.extra["trace"],
            trace_tolerance(program),
            who,
            batch_values=getattr(program, "TRACE_BATCH_VALUES", True),
        )
        measured = f"{measured}; {traced}" if measured else traced
    try:
        raise_later(ours)
    except Exception as error:
        raise AssertionError(f"trained as fit ({measured}), then {one_line(error)}") from error
    eval_tolerance = float(getattr(program, "EVAL_TOLERANCE", 1e-4))
    if getattr(program, "EVALUATE", False):
        a, b = _flat(ours.evaluated), _flat(reference.evaluated)
        assert [x.shape for x in a] == [x.shape for x in b], (
            f"evaluate returned {ours.evaluated!r}, fit's model {reference.evaluated!r}"
        )
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, atol=eval_tolerance, rtol=0, err_msg="evaluate")
    if getattr(program, "PREDICT", False):
        a, b = _flat(ours.predicted), _flat(reference.predicted)
        assert [x.shape for x in a] == [x.shape for x in b], (
            f"predict shapes {[x.shape for x in a]}, fit's model {[x.shape for x in b]}"
        )
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, atol=eval_tolerance, rtol=0, err_msg="predict")
    if hasattr(program, "check"):
        program.check(reference, ours)
    return measured


def check_trains(program: ModuleType, ours: Outcome) -> str:
    """Under mirrored: it trained (a history) and every logged value is finite."""
    assert ours.history, "no history"
    key = getattr(program, "LOSS_KEY", "loss")
    assert key in ours.history, f"history has no {key!r}: {sorted(ours.history)}"
    for name, values in ours.history.items():
        assert values and np.all(np.isfinite(values)), f"{name}: {values}"
    try:
        raise_later(ours)
    except Exception as error:
        raise AssertionError(f"trained, then {one_line(error)}") from error
    if getattr(program, "EVALUATE", False):
        assert all(np.all(np.isfinite(v)) for v in _flat(ours.evaluated)), ours.evaluated
    if getattr(program, "PREDICT", False):
        assert all(np.all(np.isfinite(v)) for v in _flat(ours.predicted)), "predict"
    return f"{key} {ours.history[key][0]:.4g} -> {ours.history[key][-1]:.4g}"


def one_line(error: BaseException) -> str:
    """An error as one line: its type and first line, and where it was raised."""
    text = str(error).strip().splitlines()
    where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    place = f" ({Path(where.filename).name}:{where.lineno})" if where else ""
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300] + place


def record(name: str, mode: str, run: Callable[[], str]) -> None:
    """Run one check of a program, recording `pass (...)` or `fail: ...` in `RESULTS`."""
    started = time.perf_counter()
    try:
        measured = run()
    except BaseException as error:
        RESULTS.setdefault(name, {})[mode] = f"fail: {one_line(error)}"
        raise
    seconds = time.perf_counter() - started
    RESULTS.setdefault(name, {})[mode] = f"pass ({measured}; {seconds:.0f} s)"


def summary_lines() -> Sequence[str]:
    programs = sorted(RESULTS)
    one = [p for p in programs if "one_device" in RESULTS[p]]
    equal = sum(RESULTS[p]["one_device"].startswith("pass") for p in one)

    def rate(judge: str) -> str:
        names = [p for p in programs if "mirrored" in RESULTS[p] and MIRRORED_JUDGE[p] == judge]
        return f"{sum(RESULTS[p]['mirrored'].startswith('pass') for p in names)}/{len(names)}"

    lines = [
        f"corpus: {equal}/{len(one)} programs equal fit under one device; under mirrored "
        f"{rate('keras')} equal Keras's fit under mirrored, {rate('trains')} train where "
        f"Keras's fit cannot run them, {rate('refusal')} refused in one line as meant"
    ]
    for p in programs:
        for mode, result in sorted(RESULTS[p].items()):
            if not result.startswith("pass"):
                lines.append(f"  {p} [{mode}] {result}")
    return lines
