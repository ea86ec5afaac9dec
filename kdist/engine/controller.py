"""The outer loop: epochs of K-step calls, validation, and the Keras callback hooks."""

from __future__ import annotations

import time
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


def fit(
    runner: Runner,
    *,
    model: keras.Model,
    callbacks: keras.callbacks.CallbackList,
    epochs: int,
    steps_per_epoch: int,
    steps_per_execution: int,
    validation_freq: int = 1,
    initial_epoch: int = 0,
) -> FitResult:
    """Train for `epochs` epochs of `steps_per_epoch` steps, calling the Keras hooks.

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
        initial_epoch: epoch to start at. Defaults to `0`.

    Returns:
        A `FitResult` with the `History`.
    """
    model.stop_training = False
    callbacks.on_train_begin()
    logs: dict[str, float] = {}
    epochs_run = steps_run = 0
    started = time.perf_counter()
    for epoch in range(initial_epoch, epochs):
        runner.train_loop_begin()
        callbacks.on_epoch_begin(epoch)
        step = 0
        while step < steps_per_epoch and not model.stop_training:
            count = min(steps_per_execution, steps_per_epoch - step)
            callbacks.on_train_batch_begin(step)
            batch_logs = runner.train_steps(count)
            step += count
            callbacks.on_train_batch_end(step - 1, batch_logs)
        steps_run += step
        logs = runner.train_loop_end()
        last = epoch + 1 == epochs or model.stop_training
        if (epoch + 1 - initial_epoch) % validation_freq == 0 or last:
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
