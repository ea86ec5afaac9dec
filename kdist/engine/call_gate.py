"""The process's gate between the training thread and background Python (checkpoint writes)."""

from __future__ import annotations

import threading

__all__ = ["TRAIN_CALLS", "CallGate"]


class CallGate:
    """Open while the training thread waits on TensorFlow: background Python waits for it.

    Between two train calls the training thread runs Python (callbacks, savers) and
    needs the GIL; inside a call it holds none. A background thread that runs Python
    (the checkpoint writer) starts its work when the gate is open, so it competes with
    TensorFlow's threads rather than with the training thread's hooks. The controller
    opens it around every train call; a thread that waits for the background work
    (`sync`) opens it too, so that nothing waits on a closed gate.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._open = 0

    def open(self) -> None:
        with self._condition:
            self._open += 1
            self._condition.notify_all()

    def close(self) -> None:
        with self._condition:
            self._open -= 1

    def wait(self, timeout: float) -> None:
        """Return when the gate is open, or after `timeout` seconds at the latest."""
        with self._condition:
            self._condition.wait_for(lambda: self._open > 0, timeout)


# The process's gate: open during train calls (`Controller`).
TRAIN_CALLS = CallGate()
