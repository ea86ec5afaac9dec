"""A run's restore when its checkpoints hold less than the run's objects do.

Two parts of a checkpoint depend on settings that may change on resume: the all-reduce's
error-feedback residuals (`trainer.allreduce_dtype`, with `trainer.allow_resume_changes`)
and the weight averager of `strategy.sync` (`strategy.*` may change: a checkpoint of
`every_step` holds no anchor, one of `local_sgd` no outer momentum). The rest of the
checkpoint must match the run's objects exactly (`kdist.engine.state.restore_newest`);
these two start anew when the checkpoint does not hold them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import tensorflow as tf

from kdist.engine.state import RESIDUALS, CheckpointError, holds_residuals, restore_newest
from kdist.engine.sync.averaging import averager_of

__all__ = ["restore_run"]

log = logging.getLogger(__name__)


def restore_run(
    checkpoint: tf.train.Checkpoint,
    backup_dir: Path,
    checkpoint_dir: Path,
    *,
    residuals: Any,
    optimizer: Any,
) -> str | None:
    """`restore_newest`, leaving out what the checkpoint was written without.

    Args:
        checkpoint: the run's checkpoint.
        backup_dir: the run's `backup/` folder.
        checkpoint_dir: the run's `checkpoints/` folder.
        residuals: the residuals `checkpoint` tracks as `RESIDUALS`, or `None`.
        optimizer: the model's optimizer, which tracks the averager of `strategy.sync`.

    Returns:
        The path restored, or `None` when there is nothing to restore.

    Raises:
        CheckpointError: when checkpoints exist but none reads.
    """
    if residuals is not None and not holds_residuals(backup_dir, checkpoint_dir):
        # Written without error feedback: no residuals to restore, they start at zero.
        delattr(checkpoint, RESIDUALS)
        try:
            return _restore_averaged(checkpoint, backup_dir, checkpoint_dir, optimizer)
        finally:
            setattr(checkpoint, RESIDUALS, residuals)
    return _restore_averaged(checkpoint, backup_dir, checkpoint_dir, optimizer)


def _restore_averaged(
    checkpoint: tf.train.Checkpoint, backup_dir: Path, checkpoint_dir: Path, optimizer: Any
) -> str | None:
    try:
        return restore_newest(checkpoint, backup_dir, checkpoint_dir)
    except CheckpointError:
        averager = averager_of(optimizer)
        if averager is None:
            raise
    # Written under another `strategy.sync.mode` (or by a kdist without some of its
    # state): everything else is restored, and the averages start anew from the restored
    # weights (`WeightAverager.restart_unless_synced`, which `synced_at` = -1 forces).
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    delattr(inner, "kdist_weight_average")
    try:
        path = restore_newest(checkpoint, backup_dir, checkpoint_dir)
    finally:
        inner.kdist_weight_average = averager
    averager.synced_at.assign(-1)
    log.info("the checkpoint holds no state of this strategy.sync.mode: averaging anew")
    return path
