"""Elastic restarts of a local multi-worker cluster: who runs next, and why (no processes).

`kdist.launch --min-workers M` lets a multi-worker run go on with fewer workers when one
is gone for good, as torchrun's `--nnodes MIN:MAX` does. The launcher numbers its worker
*slots* 0..N-1 (`--workers N`); each start of the cluster runs the slots still in it, as
workers 0..k-1 in slot order. This module decides, after each start ends, what the next
start runs. The launcher owns the processes and asks it.

The rules:

- A slot is **lost for good** when its worker fails in two starts in a row (it failed, the
  cluster restarted, and it failed again before anything else did). Only the first task
  that fails in a start is blamed: the others then fail because it went away. A slot that
  fails once is restarted in place (a crash, an OOM kill, a preempted machine come back).
- A lost slot leaves the cluster: the next start has one worker fewer, never fewer than
  `min_workers` (below that the launch stops with the failure's status). Training resumes
  from the last backup; kdist maps the step by examples consumed, so no example is lost
  or repeated.
- Every restart after a failure, shrinking ones included, counts against
  `max_restarts`; an exit 42 (a task saved on SIGTERM) counts as well, as before.
- With `grow_after` seconds, a shrunk cluster that has run that long is asked to save
  (SIGTERM; the tasks exit 42 after a backup) and restarts with every slot: a planned
  restart, not counted. A slot brought back that fails in that start is lost again at once.

Example:

```python
policy = ElasticPolicy(workers=3, min_workers=2, max_restarts=3)
policy.after_failure(worker=2)   # restart with 3 (first failure of slot 2)
policy.after_failure(worker=2)   # slot 2 lost for good: restart with 2 of 3
```
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LOST_AFTER", "Decision", "ElasticPolicy"]

# Failures in a row after which a slot is gone for good.
LOST_AFTER = 2


@dataclass(frozen=True)
class Decision:
    """What the launcher does after a start of the cluster ended.

    Attributes:
        restart: start the cluster again (else stop and return the failure's status).
        workers: workers in the next start.
        message: one line for the log saying what changed, or `""`.
        counted: whether the restart uses one of `max_restarts`.
    """

    restart: bool
    workers: int
    message: str = ""
    counted: bool = True


class ElasticPolicy:
    """The worker slots of a local cluster and the restart budget.

    All arguments are keyword-only.

    Args:
        workers: worker slots (`--workers`): the most workers a start runs.
        min_workers: fewest workers to go on with (`--min-workers`). Defaults to `None`:
            `workers`, i.e. not elastic (a failed worker is restarted in place).
        max_restarts: restarts after failures (`--max-restarts`). Defaults to `0`.
        grow_after: seconds a shrunk cluster runs before it is asked to save and restart
            with every slot (`--grow-after`). Defaults to `None`: it stays shrunk.

    Raises:
        ValueError: naming the argument, for values out of range.
    """

    def __init__(
        self,
        *,
        workers: int,
        min_workers: int | None = None,
        max_restarts: int = 0,
        grow_after: float | None = None,
    ):
        minimum = workers if min_workers is None else min_workers
        if workers < 1:
            raise ValueError(f"`workers` ({workers}) must be a positive integer.")
        if not 1 <= minimum <= workers:
            raise ValueError(f"`min_workers` ({minimum}) must be between 1 and {workers}.")
        if max_restarts < 0:
            raise ValueError(f"`max_restarts` ({max_restarts}) must be >= 0.")
        if grow_after is not None and grow_after <= 0:
            raise ValueError(f"`grow_after` ({grow_after}) must be a positive number.")
        self.slots = workers
        self.min_workers = minimum
        self.max_restarts = max_restarts
        self.grow_after = grow_after
        self.restarts = 0
        self.active = list(range(workers))
        self._strikes = dict.fromkeys(self.active, 0)

    @property
    def elastic(self) -> bool:
        """Whether the cluster may run with fewer workers than slots."""
        return self.min_workers < self.slots

    @property
    def workers(self) -> int:
        """Workers in the next (or current) start."""
        return len(self.active)

    @property
    def shrunk(self) -> bool:
        """Whether the current start runs fewer workers than there are slots."""
        return self.workers < self.slots

    def slot_of(self, worker: int) -> int:
        """The slot that runs as worker `worker` in the current start."""
        return self.active[worker]

    def grow_due(self, seconds_running: float) -> bool:
        """Whether a shrunk start has run long enough to be asked to grow back."""
        return self.shrunk and self.grow_after is not None and seconds_running >= self.grow_after

    def after_failure(self, *, worker: int | None) -> Decision:
        """A start ended with a failure; `worker` is the first failed worker, if any.

        `worker` is `None` when no worker slot is to blame (a chief or parameter server
        failed, or a task asked to be restarted with exit 42): the cluster restarts as it is.
        """
        if worker is None:
            self._clear_strikes(except_slot=None)
            return self._restart(self.workers, "")
        slot = self.slot_of(worker)
        self._clear_strikes(except_slot=slot)
        self._strikes[slot] += 1
        if not self.elastic or self._strikes[slot] < LOST_AFTER:
            return self._restart(self.workers, "")
        left = [s for s in self.active if s != slot]
        if len(left) < self.min_workers:
            return Decision(
                restart=False,
                workers=self.workers,
                message=f"worker {worker} lost for good: {len(left)} worker(s) left, fewer "
                f"than --min-workers {self.min_workers}; stopping",
            )
        decision = self._restart(
            len(left),
            f"worker {worker} lost for good: restarting with {len(left)} of {self.slots} "
            "workers from the last backup",
        )
        if decision.restart:
            self.active = left
        return decision

    def grow(self) -> Decision:
        """The shrunk cluster saved on request: restart it with every slot (not counted)."""
        returning = [s for s in range(self.slots) if s not in self.active]
        for slot in returning:
            # One more failure and it is out again.
            self._strikes[slot] = LOST_AFTER - 1
        self.active = list(range(self.slots))
        return Decision(
            restart=True,
            workers=self.slots,
            message=f"growing back: restarting with {self.slots} of {self.slots} workers "
            "from the backup just saved",
            counted=False,
        )

    def _restart(self, workers: int, message: str) -> Decision:
        if self.restarts >= self.max_restarts:
            return Decision(restart=False, workers=self.workers)
        self.restarts += 1
        return Decision(restart=True, workers=workers, message=message)

    def _clear_strikes(self, *, except_slot: int | None) -> None:
        # A slot that ran through a start another task ended is not failing in a row.
        for slot in self.active:
            if slot != except_slot:
                self._strikes[slot] = 0
