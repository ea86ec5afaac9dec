"""The snapshot protocol of asynchronous saves: a train call copies the variables first.

An asynchronous saver (`kdist.engine.checkpoint.writer.HostWriter`) copies the variables
to host memory inside the train call that follows a save, instead of in a call of its
own: it hands the runner a `SnapshotFn` (`set_snapshot`), asks for it before a call
(`snapshot_next_call`) and reads what it returned after (`pop_snapshot`). A runner that
cannot (`set_snapshot` answers `False`) leaves the saver to copy in a call of its own.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

__all__ = ["SnapshotFn", "SnapshotTaker"]

# `snapshot(which, steps)`: copy the variables to host buffer `which` (an int32 tensor;
# -1 copies nothing) and record `steps` (int64); returns whether the weights are finite.
SnapshotFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


class SnapshotTaker:
    """The runner's side of the snapshot protocol; by default, it takes none."""

    def set_snapshot(self, snapshot: SnapshotFn) -> bool:
        """Let train calls run `snapshot` before their steps, when asked (`snapshot_next_call`).

        The asynchronous savers copy the variables to host memory this way, inside the
        call that follows a save instead of in a call of their own. Returns `False` when
        the runner cannot (the saver then copies in a call of its own).
        """
        return False

    def snapshot_next_call(self, which: int, steps: int) -> None:
        """Run the snapshot with `(which, steps)` at the start of the next train call."""
        raise NotImplementedError(f"{type(self).__name__} runs no snapshot in its calls")

    def cancel_snapshot(self) -> None:
        """Forget a snapshot asked for and not run yet."""
        return None

    def pop_snapshot(self) -> tf.Tensor | None:
        """What the snapshot the last train call ran returned (once), or `None`."""
        return None
