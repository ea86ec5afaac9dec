"""Callbacks that stop a run safely.

`NonFiniteGuard` ends training as soon as the loss stops being finite, before a bad
state is saved; `PreemptionSave` saves a backup when the process is told to stop
(SIGTERM; Ctrl-C on the command line) and exits with a restart code.
"""

from __future__ import annotations

import logging
import math
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from kdist.cluster import chief
from kdist.engine.checkpoint.finite import NonFiniteLossError, NonFiniteWeightsError
from kdist.process.exit_codes import EXIT_INTERRUPTED, EXIT_NON_FINITE, EXIT_RESTART

__all__ = [
    "EXIT_NON_FINITE",
    "EXIT_RESTART",
    "NonFiniteGuard",
    "NonFiniteLossError",
    "NonFiniteWeightsError",
    "PreemptionSave",
    "save_on_ctrl_c",
]

log = logging.getLogger(__name__)


class NonFiniteGuard(keras.callbacks.Callback):
    """Raise `NonFiniteLossError` as soon as the running training loss is not finite.

    Keras's `TerminateOnNaN` lets training end normally with NaN weights; this guard ends
    it with an error (the train command exits with status 3). It runs before the
    checkpoint callbacks in the same hook, so the last backup keeps finite weights.

    Placed after a user's `TerminateOnNaN` (`after_terminate_on_nan`), it lets that
    callback act first, as in Keras's `fit`: one that stops training gracefully
    (`raise_error=False`) ends the run without this error (the controller saves nothing
    of that state).

    Args:
        monitor: the logged value to check. Defaults to `"loss"`.
        after_terminate_on_nan: a user's `TerminateOnNaN` runs before this guard.
            Defaults to `False`.
    """

    def __init__(self, *, monitor: str = "loss", after_terminate_on_nan: bool = False):
        super().__init__()
        self.monitor = monitor
        self.after_terminate_on_nan = after_terminate_on_nan
        self.steps = 0
        self._epoch = 0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch

    def _check(self, logs: dict[str, Any] | None) -> None:
        if not logs or self.monitor not in logs:
            return
        value = float(logs[self.monitor])
        if not math.isfinite(value):
            if self.after_terminate_on_nan and self.model.stop_training:
                return  # the user's TerminateOnNaN stopped training, as in Keras's fit
            raise NonFiniteLossError(
                f"training {self.monitor} is {value} after step {self.steps}; stopped without "
                "saving this state"
            )

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        # `batch` is the last step of the call inside the epoch (0-based), as in `fit`.
        self.steps = self._epoch * int(self.params.get("steps") or 0) + batch + 1
        self._check(logs)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._check(logs)


_SAVE_ON_CTRL_C = False


def save_on_ctrl_c(enabled: bool) -> None:
    """Make `PreemptionSave` treat Ctrl-C like SIGTERM (save, exit 130) from now on.

    The command line turns it on; a notebook's interrupt stays a `KeyboardInterrupt`.
    """
    global _SAVE_ON_CTRL_C
    _SAVE_ON_CTRL_C = enabled


class PreemptionSave(keras.callbacks.Callback):
    """On SIGTERM: save a backup at a step every worker agrees on, then exit 42.

    Multi-worker runs use `tf.distribute.experimental.PreemptionCheckpointHandler` to
    agree on the step across workers (a SIGTERM to any one of them makes all of them save
    at the same step); the save itself goes through `save` (kdist's backup, chief-only
    writes). A single process installs its own SIGTERM handler and saves after the
    current call.

    Under `python -m kdist.train` (`save_on_ctrl_c(True)`), Ctrl-C (SIGINT) in a single
    process does the same and exits 130 with one line: a user's habit is Ctrl-C, then the
    same command again. A second Ctrl-C stops at once (`KeyboardInterrupt`). Elsewhere
    (a notebook's interrupt) and in multi-worker tasks SIGINT keeps Python's default.

    Args:
        save: saves a backup at the current step.
        strategy: the run's strategy.
        run_dir: the run directory (names this task's scratch folder).
        exit_fn: called after the save. Defaults to `None`: `sys.exit(42)`.
    """

    def __init__(
        self,
        *,
        save: Callable[[], Any],
        strategy: tf.distribute.Strategy,
        run_dir: Path,
        exit_fn: Callable[[], Any] | None = None,
    ):
        super().__init__()
        self._run_dir = run_dir
        self._save = save
        self._exit = exit_fn or self._default_exit
        self._strategy = strategy
        self._handler: Any = None
        self._scratch: Path | None = None
        self._requested = False
        self._signal = signal.SIGTERM
        self._previous: Any = None
        self._previous_int: Any = None

    def _default_exit(self) -> None:
        if self._signal == signal.SIGINT:
            print(
                "kdist: interrupted (Ctrl-C): saved a backup; run the same command again to resume",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(EXIT_INTERRUPTED)
        sys.exit(EXIT_RESTART)

    def _multi_worker(self) -> bool:
        # The handler supports MultiWorkerMirroredStrategy, not ParameterServerStrategy
        # (whose coordinator is a single process, like the local case).
        return isinstance(self._strategy, tf.distribute.MultiWorkerMirroredStrategy) and (
            chief.task_info(self._strategy)[0] is not None
        )

    def _save_and_exit(self) -> None:
        if self._signal == signal.SIGINT:
            log.warning("interrupted (Ctrl-C): saving a backup, then exiting %d", EXIT_INTERRUPTED)
        else:
            log.warning(
                "termination requested: saving a backup, then exiting with %d", EXIT_RESTART
            )
        self._save()
        self._cleanup_and_exit()

    def _cleanup_and_exit(self) -> None:
        self.on_train_end()
        self._exit()

    def on_train_begin(self, logs: dict | None = None) -> None:
        if self._multi_worker():
            # The handler needs a checkpoint of its own to count its calls; kdist saves
            # through `save_fn`, so that one lives in a scratch folder that is removed.
            self._scratch = chief.scratch_dir(self._run_dir, self._strategy, "preemption")
            config = tf.distribute.experimental.TerminationConfig(
                exit_fn=self._cleanup_and_exit, save_fn=lambda *a, **k: self._announce_and_save()
            )
            self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                self._strategy.cluster_resolver,
                tf.train.Checkpoint(),
                checkpoint_dir=str(self._scratch),
                termination_config=config,
            )
        else:
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            if _SAVE_ON_CTRL_C and threading.current_thread() is threading.main_thread():
                self._previous_int = signal.signal(signal.SIGINT, self._on_sigint)

    def _announce_and_save(self) -> None:
        log.warning("termination requested in the cluster: saving a backup at an agreed step")
        self._save()

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self._requested = True
        self._signal = signal.SIGTERM

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self._requested:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, unsaved
        self._requested = True
        self._signal = signal.SIGINT

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self._handler is not None:
            self._handler.save_checkpoint_if_preempted()
        elif self._requested:
            self._save_and_exit()

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
        if self._previous_int is not None:
            signal.signal(signal.SIGINT, self._previous_int)
            self._previous_int = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
