"""`ClusterSpeed`: one line, in a local cluster, saying what one process must beat.

`kdist.launch` starts every task of a local cluster on the same machine, where a cluster
is often slower than one process using all the cores (benchmarks/README.md, the scaling
suite). The chief of such a run prints, once, after its first timed epoch (the second:
the first traces the functions and connects the cluster), the examples per second the
cluster trained and the rate one process on the same machine would need to beat it.
"""

from __future__ import annotations

import os
import time
from typing import Any

import keras

from kdist.config.constants import LOCAL_CLUSTER_ENV

__all__ = ["LOCAL_CLUSTER_ENV", "ClusterSpeed", "from_environment"]


class ClusterSpeed(keras.callbacks.Callback):
    """Print the cluster's examples/s after the first timed epoch, once.

    Args:
        examples_per_step: the global batch.
        workers: training workers of the cluster.
        ps: parameter servers of the cluster. Defaults to `0`.
        timed_epoch: the (0-based) epoch that is timed; earlier ones trace and connect.
            Defaults to `1`.

    Raises:
        ValueError: for a non-positive `examples_per_step` or `workers`.
    """

    def __init__(self, *, examples_per_step: int, workers: int, ps: int = 0, timed_epoch: int = 1):
        super().__init__()
        for name, value in (("examples_per_step", examples_per_step), ("workers", workers)):
            if int(value) < 1:
                raise ValueError(f"`{name}` ({value}) must be a positive integer.")
        self.examples_per_step = int(examples_per_step)
        self.workers = int(workers)
        self.ps = int(ps)
        self.timed_epoch = int(timed_epoch)
        self._started: float | None = None
        self._first_step: int | None = None
        self.printed: str | None = None

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch == self.timed_epoch and self.printed is None:
            self._started = time.perf_counter()
            self._first_step = self._step()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._started is None or self._first_step is None or self.printed is not None:
            return
        seconds = time.perf_counter() - self._started
        steps = self._step() - self._first_step
        if steps <= 0 or seconds <= 0:
            return
        rate = steps * self.examples_per_step / seconds
        shape = f"{self.workers} worker(s)" + (f" + {self.ps} ps" if self.ps else "")
        self.printed = (
            f"kdist.launch: this local cluster ({shape}) trained {rate:,.0f} examples/s in "
            f"epoch {epoch + 1}; one process on this machine beats it above {rate:,.0f} "
            f"examples/s ({rate / self.workers:,.0f} per worker): compare with the same "
            "overrides and strategy=one_device"
        )
        print(self.printed, flush=True)


def from_environment(examples_per_step: int | None) -> ClusterSpeed | None:
    """The callback for a task `kdist.launch` started in a local cluster, or `None`."""
    value = os.environ.get(LOCAL_CLUSTER_ENV, "").strip()
    if not value or not examples_per_step:
        return None
    try:
        workers, ps = (int(part) for part in value.split(","))
    except ValueError:
        return None
    if workers < 1:
        return None
    return ClusterSpeed(examples_per_step=examples_per_step, workers=workers, ps=ps)
