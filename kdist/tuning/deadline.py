"""`tuner.trial_timeout`: a time limit for one trial (building its model, then training).

A slow `build_model(hp)` runs Python code that kdist does not control: an interval timer
(`SIGALRM`, in the main thread) interrupts it with `TrialTimeout` when the time is up.
Training is stopped more gently: the engine runs Keras callbacks between its steps, and
`StopAtDeadline` sets `model.stop_training` there, so the run ends on a step boundary
and its files stay whole; the trial then fails with the same reason.

In a thread other than the main one no timer can be set: only training is bounded there.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import keras

__all__ = ["Deadline", "StopAtDeadline", "TrialTimeout", "deadline"]

log = logging.getLogger(__name__)


class TrialTimeout(BaseException):
    """A trial ran past `tuner.trial_timeout`.

    A `BaseException`, as `KeyboardInterrupt` is: code that catches `Exception` around
    the user's `build_model` does not turn it into another error.
    """

    def __init__(self, seconds: float, what: str):
        super().__init__(f"took more than tuner.trial_timeout={seconds:g} s ({what})")
        self.seconds = seconds
        self.what = what


class Deadline:
    """The end of one trial's time; `what` says what the trial is doing (for the reason).

    Args:
        seconds: the time allowed, or `None` for no limit.
        what: what the trial does first. Defaults to `"building its model"`.
    """

    def __init__(self, seconds: float | None, what: str = "building its model"):
        self.seconds = seconds
        self.what = what
        self.ends = None if seconds is None else time.monotonic() + float(seconds)
        self.interrupts = True  # raise from the timer (False while the engine trains)
        self.active = False

    def expired(self) -> bool:
        return self.ends is not None and time.monotonic() >= self.ends

    def error(self) -> TrialTimeout:
        assert self.seconds is not None
        return TrialTimeout(float(self.seconds), self.what)

    def check(self) -> None:
        """Raise `TrialTimeout` when the time is up."""
        if self.expired():
            raise self.error()

    @contextlib.contextmanager
    def training(self, what: str = "training") -> Iterator[None]:
        """While the engine trains, the timer does not interrupt it; `StopAtDeadline` does."""
        self.what, before = what, self.interrupts
        self.interrupts = False
        try:
            yield
        finally:
            self.interrupts = before

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if self.active and self.interrupts:
            raise self.error()


class StopAtDeadline(keras.callbacks.Callback):
    """Stop training at the next step once the deadline has passed."""

    def __init__(self, deadline: Deadline):
        super().__init__()
        self.deadline = deadline

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.deadline.expired():
            self.model.stop_training = True

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.on_train_batch_end(epoch, logs)


@contextlib.contextmanager
def deadline(seconds: float | None, *, what: str = "building its model") -> Iterator[Deadline]:
    """A `Deadline` of `seconds` for the block, with the interval timer set when it can be.

    Args:
        seconds: the time allowed; `None` sets no limit. Defaults to none.
        what: what the block does first, for the reason. Defaults to `"building its model"`.

    Raises:
        TrialTimeout: from the block, when the timer fires outside `Deadline.training`.
        ValueError: for `seconds` that is not positive.
    """
    if seconds is not None and not float(seconds) > 0:
        raise ValueError(f"`seconds` ({seconds}) must be positive or None.")
    limit = Deadline(seconds, what)
    use_timer = (
        seconds is not None
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if seconds is not None and not use_timer:
        log.info("tuner.trial_timeout bounds only training here (no timer outside the main thread)")
    if not use_timer:
        yield limit
        return
    previous = signal.signal(signal.SIGALRM, limit._on_alarm)
    limit.active = True
    signal.setitimer(signal.ITIMER_REAL, float(seconds or 0))
    try:
        yield limit
    finally:
        limit.active = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
