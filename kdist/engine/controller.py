"""The outer loop: epochs of K-step calls, validation, and the Keras callback hooks."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import keras

from kdist.engine.runner import Runner

__all__ = ["FitResult", "fit"]


@dataclass
class FitResult:
    """What `fit` returns besides the Keras `History`."""

    history: keras.callbacks.History
    epochs_run: int
    steps_run: int
    train_seconds: float
    final_logs: dict[str, float] = field(default_factory=dict)


def _next_count(step: int, global_step: int, limit: int, align: Sequence[int]) -> int:
    """Steps in the next call: at most `limit`, ending on every multiple in `align`."""
    count = limit
    for interval in align:
        if interval > 0:
            count = min(count, interval - global_step % interval)
    return max(count, 1)


def fit(
    runner: Runner,
    *,
    model: keras.Model,
    callbacks: keras.callbacks.CallbackList,
    epochs: int,
    steps_per_epoch: int,
    steps_per_execution: int,
    validation_freq: int = 1,
    initial_step: int = 0,
    align: Sequence[int] = (),
    step_listeners: Sequence[Callable[[int], None]] = (),
) -> FitResult:
    """Train until `epochs * steps_per_epoch` steps are done, calling the Keras hooks.

    Batch hooks run once per call of the runner (every `steps_per_execution` steps), as
    in Keras's `fit`; `model.stop_training` set by a callback ends the run after the
    current call.

    Args:
        runner: how steps run under the strategy.
        model: the model the callbacks see.
        callbacks: the callbacks, with their params set.
        epochs: epoch to stop at.
        steps_per_epoch: optimizer steps per epoch.
        steps_per_execution: most steps per runner call.
        validation_freq: validate every this many epochs (and after the last). Defaults to `1`.
        initial_step: steps already done (a resumed run); training continues inside the
            epoch that step falls in. Defaults to `0`.
        align: step intervals calls must end on (e.g. a backup every N steps), so that
            a save happens exactly at a multiple of N. Defaults to `()`.
        step_listeners: called with the global step after each call, before the batch
            hooks (Orbit-style actions). Defaults to `()`.

    Returns:
        A `FitResult` with the `History`.
    """
    model.stop_training = False
    initial_epoch, first_step = divmod(initial_step, steps_per_epoch)
    callbacks.on_train_begin()
    logs: dict[str, float] = {}
    epochs_run = steps_run = 0
    started = time.perf_counter()
    for epoch in range(initial_epoch, epochs):
        step = first_step if epoch == initial_epoch else 0
        # A resumed epoch keeps the running metrics restored with the checkpoint.
        runner.train_loop_begin(reset_metrics=step == 0)
        callbacks.on_epoch_begin(epoch)
        while step < steps_per_epoch and not model.stop_training:
            global_step = epoch * steps_per_epoch + step
            limit = min(steps_per_execution, steps_per_epoch - step)
            count = _next_count(step, global_step, limit, align)
            callbacks.on_train_batch_begin(step)
            batch_logs = runner.train_steps(count)
            step += count
            steps_run += count
            for listener in step_listeners:
                listener(global_step + count)
            callbacks.on_train_batch_end(step - 1, batch_logs)
        logs = runner.train_loop_end()
        last = epoch + 1 == epochs or model.stop_training
        if (epoch + 1) % validation_freq == 0 or last:
            callbacks.on_test_begin()
            val_logs = runner.evaluate()
            callbacks.on_test_end(val_logs)
            logs.update({f"val_{name}": value for name, value in val_logs.items()})
        callbacks.on_epoch_end(epoch, logs)
        epochs_run += 1
        if model.stop_training:
            break
    train_seconds = time.perf_counter() - started
    callbacks.on_train_end(logs)
    return FitResult(
        history=model.history,
        epochs_run=epochs_run,
        steps_run=steps_run,
        train_seconds=train_seconds,
        final_logs=dict(logs),
    )
