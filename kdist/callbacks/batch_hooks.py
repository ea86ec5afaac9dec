"""Say once when a user's callback has batch hooks that kdist calls less often than `fit`.

kdist runs `trainer.steps_per_execution` steps (8 by default) in one call of its train
function and calls `on_train_batch_begin`/`on_train_batch_end` once per call, where
Keras's `fit` (`steps_per_execution=1`) calls them every step; and under parameter
servers its validation runs the whole split in one call, with no `on_test_batch_*` hook
(elsewhere it calls them as Keras's `evaluate` does).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import keras

__all__ = ["TEST_HOOKS", "TRAIN_HOOKS", "batch_hook_note", "overridden_hooks", "say_batch_hooks"]

log = logging.getLogger(__name__)

# `on_batch_*` are Keras's older names: `Callback.on_train_batch_*` calls them.
TRAIN_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")
TEST_HOOKS = ("on_test_batch_begin", "on_test_batch_end")

_said: set[str] = set()


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
