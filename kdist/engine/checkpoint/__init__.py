"""Periodic checkpoints and backups, saved asynchronously where TensorFlow allows.

What a checkpoint holds, part by part, and how each part is read back is `parts`
(with `kdist.engine.state`); the rest of this package writes them, on the schedule
the controller keeps. It is not a Keras callback: the
controller drives its savers. One module per job: `saver` (`PeriodicCheckpoint`, the
save policy), `writer` (the writer thread), `host_copies` (the host copies a save
writes, Keras variables in TensorFlow's async copies, the gate the writer waits at),
`files` (hard links, writes through the writer), `finite` (no non-finite save).
"""

from kdist.engine.checkpoint.finite import NonFiniteLossError, NonFiniteWeightsError
from kdist.engine.checkpoint.saver import PeriodicCheckpoint
from kdist.engine.checkpoint.writer import CheckpointWriteError, finish_writes

__all__ = [
    "CheckpointWriteError",
    "NonFiniteLossError",
    "NonFiniteWeightsError",
    "PeriodicCheckpoint",
    "finish_writes",
]
