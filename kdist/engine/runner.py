"""The interface the controller drives: what a runner is (Orbit's `runner.py`).

`kdist.engine.step.StepRunner` holds the per-replica train and test steps and the
metric logic, the same under every strategy (Orbit's `standard_runner.py`, Keras's
`TensorFlowTrainer`). Its subclasses differ only in how a call is dispatched and how the
data is distributed: `StandardRunner` for the synchronous strategies,
`ParameterServerRunner` for parameter servers. The asynchronous savers' snapshot protocol
is `kdist.engine.snapshot`, the process's gate for background writes
`kdist.engine.checkpoint.host_copies.TRAIN_CALLS`.

The batch hooks a runner calls: kdist runs `trainer.steps_per_execution` steps (8 by
default) in one call of its train function and calls `on_train_batch_begin`/
`on_train_batch_end` once per call, where Keras's `fit` (`steps_per_execution=1`) calls
them every step; and under parameter servers its validation runs the whole split in one
call, with no `on_test_batch_*` hook (elsewhere it calls them as Keras's `evaluate`
does). `say_batch_hooks` says so once when a user's callback has such hooks.
"""

from __future__ import annotations

import abc
import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

import keras
import numpy as np

from kdist.data.pipeline import DatasetFn
from kdist.engine.snapshot import SnapshotTaker

__all__ = [
    "TEST_HOOKS",
    "TRAIN_HOOKS",
    "Logs",
    "Runner",
    "batch_hook_note",
    "flat_logs",
    "non_finite_loss",
    "overridden_hooks",
    "say_batch_hooks",
    "to_floats",
    "wants_test_hooks",
]

log = logging.getLogger(__name__)

# `on_batch_*` are Keras's older names: `Callback.on_train_batch_*` calls them.
TRAIN_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")
TEST_HOOKS = ("on_test_batch_begin", "on_test_batch_end")

_said: set[str] = set()


# Metric name -> value (a scalar tensor between steps, a float at epoch ends).
Logs = Mapping[str, Any]


class Runner(SnapshotTaker, abc.ABC):
    """Runs training and evaluation steps under one strategy.

    The controller (`kdist.engine.controller.Controller`) owns the global step, epochs,
    saves, callbacks and validation timing; a runner owns how steps run.
    """

    # The training data may end inside an epoch (one of unknown length,
    # `kdist.data.given_pipeline.OPEN_EPOCH`): the controller makes calls of one step,
    # and the call that finds the data ended runs none and sets `data_ended`.
    open_ended = False
    data_ended = False
    # The checkpoint's optional parts this runner trains with
    # (`kdist.engine.checkpoint.parts.run_parts`): the all-reduce's error-feedback
    # residuals (`kdist.strategies.compression.ErrorFeedback`) and `strategy.sync`'s
    # averager (`kdist.engine.sync.averaging.WeightAverager`). The next runner of the
    # same optimizer (a notebook's next `fit`) carries them on (`carried_on`).
    error_feedback: Any = None
    averager: Any = None

    def fit_begin(self) -> None:
        """Start a `fit` call, before `on_train_begin` (nothing by default)."""

    def carried_on(self, previous: Runner | None) -> Runner | None:
        """`previous` when it trained this runner's optimizer, else `None`."""
        optimizer = getattr(self, "optimizer", None)
        if optimizer is None or getattr(previous, "optimizer", None) is not optimizer:
            return None
        return previous

    @abc.abstractmethod
    def train_loop_begin(self, *, reset_metrics: bool = True, first_step: int = 0) -> None:
        """Start an epoch: reset the training metrics (not when resuming inside it), at
        the latest before the epoch's first step; `first_step` is the step of the epoch
        that the run resumes at (data read one pass an epoch skips the steps before)."""

    @abc.abstractmethod
    def train_steps(self, num_steps: int) -> Logs:
        """Run `num_steps` optimizer steps and return the epoch's running metrics."""

    @abc.abstractmethod
    def train_loop_end(self, *, complete: bool = True) -> dict[str, float]:
        """End an epoch: the training metrics as floats; `complete`: the epoch ran all
        of its steps (not stopped by a callback)."""

    @abc.abstractmethod
    def evaluate(self, callbacks: Any = None) -> dict[str, float]:
        """Run the validation data once and return its metrics as floats.

        With `callbacks` (a Keras `CallbackList` whose callbacks define test-batch
        hooks), the data runs as Keras's `evaluate` runs it: calls of
        `steps_per_execution` batches between `on_test_batch_begin` and
        `on_test_batch_end`. Without, in the runner's fastest way (one call where it can).
        """

    def settle(self) -> None:
        """Return when every step given to `train_steps` has been applied (before a save).

        A no-op where a call returns with its steps applied; the parameter-server runner
        waits for its scheduled functions.
        """
        return None

    @property
    def validates(self) -> bool:
        """Whether the run has validation data (`evaluate` has something to run)."""
        return True

    @abc.abstractmethod
    def set_train_dataset_fn(self, dataset_fn: DatasetFn) -> None:
        """Replace the training data (e.g. advanced to a resumed position)."""

    @property
    @abc.abstractmethod
    def metric_variables(self) -> list[Any]:
        """The running metrics' variables, saved with checkpoints."""

    def failure(self, error: BaseException) -> BaseException | None:
        """The error to report for `error` raised while training, or `None` for itself.

        A parameter-server runner names the lost parameter server behind a cancelled
        step; other runners report errors as they are.
        """
        return None


def flat_logs(logs: Mapping[Any, Any]) -> dict[str, Any]:
    """Logs with nested dicts merged in (a compiled metrics' `result()`), as Keras's
    `pythonify_logs` flattens what a `train_step` returns."""
    flat: dict[str, Any] = {}
    for key, value in logs.items():
        if isinstance(value, Mapping):
            flat.update(flat_logs(value))
        else:
            flat[str(key)] = value
    return flat


def non_finite_loss(logs: Logs | None) -> bool:
    """Whether `logs` hold a `loss` that is NaN or infinite (Keras's `TerminateOnNaN` test)."""
    loss = (logs or {}).get("loss")
    return loss is not None and not math.isfinite(float(loss))


def to_floats(logs: Logs) -> dict[str, Any]:
    """The logs with every scalar as a Python float, as Keras's `pythonify_logs` makes
    them; a metric with several values (`F1Score()`, one per class) stays a NumPy array."""
    floats: dict[str, Any] = {}
    for name, value in logs.items():
        array = np.array(value)  # a copy: a tensor's NumPy value can share its memory
        floats[name] = float(array) if array.ndim == 0 else array
    return floats


def wants_test_hooks(callbacks: Iterable[keras.callbacks.Callback]) -> bool:
    """Whether a callback defines a test-batch hook (not `Callback`'s no-op), so that
    validation runs in Keras's calls (`Runner.evaluate(callbacks)`) rather than in one.

    As `overridden_hooks` decides, but two of Keras's own do not count, as their hooks
    change nothing there: `ProgbarLogger`'s, which do nothing inside `fit`
    (`_called_in_fit`), and `TensorBoard`'s with `update_freq="epoch"`, which only count
    the batches for batch-level writing (`_push_writer` returns at once). So the default
    job (kdist's progress bar and per-epoch TensorBoard) keeps its one-call validation.
    """
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.ProgbarLogger):
            continue
        for name in overridden_hooks(callback, TEST_HOOKS):
            method = getattr(callback, name)
            function = getattr(method, "__func__", method)
            if (
                isinstance(callback, keras.callbacks.TensorBoard)
                and callback.update_freq == "epoch"
                and function is getattr(keras.callbacks.TensorBoard, name)
            ):
                continue
            return True
    return False


def overridden_hooks(callback: keras.callbacks.Callback, hooks: Iterable[str]) -> list[str]:
    """The hooks among `hooks` that `callback` defines itself (not `Callback`'s no-ops).

    A method of its class or of any base but `keras.callbacks.Callback` counts, and so
    does a function set on the instance (`keras.callbacks.LambdaCallback`).
    """
    found = []
    for name in hooks:
        method = getattr(callback, name, None)
        function = getattr(method, "__func__", method)
        if function is not None and function is not getattr(keras.callbacks.Callback, name):
            found.append(name)
    return found


def batch_hook_note(
    callbacks: Iterable[keras.callbacks.Callback],
    *,
    steps_per_execution: int,
    parameter_server: bool = False,
) -> str | None:
    """One line saying how the batch hooks of `callbacks` run, or `None` if as in `fit`.

    Args:
        callbacks: the user's callbacks (passed to `fit` or in `callbacks.extra`).
        steps_per_execution: `trainer.steps_per_execution`.
        parameter_server: the run's strategy is `ParameterServerStrategy`, whose
            coordinator validates in one call with no test-batch hook (elsewhere the
            validation calls them as Keras's `evaluate` does). Defaults to `False`.
    """
    train, test = [], []
    for callback in callbacks:
        name = type(callback).__name__
        if steps_per_execution > 1:
            train += [f"{name}.{hook}" for hook in overridden_hooks(callback, TRAIN_HOOKS)]
        if parameter_server:
            test += [f"{name}.{hook}" for hook in overridden_hooks(callback, TEST_HOOKS)]
    parts = []
    if train:
        parts.append(
            f"{', '.join(train)} run once every {steps_per_execution} steps, not every step as "
            f"in Keras's fit: kdist runs trainer.steps_per_execution={steps_per_execution} "
            "steps per call; set trainer.steps_per_execution=1 to call them every step"
        )
    if test:
        parts.append(
            f"{', '.join(test)} are not called during fit under parameter servers: the "
            "coordinator validates the whole split in one call"
        )
    return "; ".join(parts) if parts else None


def say_batch_hooks(
    callbacks: Iterable[keras.callbacks.Callback],
    *,
    steps_per_execution: int,
    parameter_server: bool = False,
) -> None:
    """Log `batch_hook_note` (a warning) once per process for each different note."""
    note = batch_hook_note(
        callbacks, steps_per_execution=steps_per_execution, parameter_server=parameter_server
    )
    if note is not None and note not in _said:
        _said.add(note)
        log.warning("%s", note)
