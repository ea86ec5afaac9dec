"""A run's restore when its checkpoints hold less than the run's objects do.

Two parts of a checkpoint depend on settings that may change on resume: the all-reduce's
error-feedback residuals (`trainer.allreduce_dtype`, with `trainer.allow_resume_changes`)
and the weight averager of `strategy.sync` (`strategy.*` may change: a checkpoint of
`every_step` holds no anchor, one of `local_sgd` no outer momentum; one saved between two
averages holds each replica's weights, of which a run that does not average takes the
mean). The rest of the
checkpoint must match the run's objects exactly (`kdist.engine.state.restore_newest`);
these two start anew when the checkpoint does not hold them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import tensorflow as tf

from kdist.compat.keras_private import optimizer_variables
from kdist.engine.building import optimizer_steps
from kdist.engine.state import RESIDUALS, CheckpointError, holds_residuals, restore_newest
from kdist.engine.sync.averaging import averager_of, running_statistics

__all__ = ["restore_run"]

log = logging.getLogger(__name__)


def restore_run(
    checkpoint: tf.train.Checkpoint,
    backup_dir: Path,
    checkpoint_dir: Path,
    *,
    residuals: Any,
    optimizer: Any,
    model: Any = None,
) -> str | None:
    """`restore_newest`, leaving out what the checkpoint was written without.

    Args:
        checkpoint: the run's checkpoint.
        backup_dir: the run's `backup/` folder.
        checkpoint_dir: the run's `checkpoints/` folder.
        residuals: the residuals `checkpoint` tracks as `RESIDUALS`, or `None`.
        optimizer: the model's optimizer, which tracks the averager of `strategy.sync`.
        model: the model (a local SGD save between two averages, restored by a run that
            does not average, gives it the mean of the replicas' weights). Defaults to
            `None`: the first replica's.

    Returns:
        The path restored, or `None` when there is nothing to restore.

    Raises:
        CheckpointError: when checkpoints exist but none reads.
    """
    if residuals is not None and not holds_residuals(backup_dir, checkpoint_dir):
        # Written without error feedback: no residuals to restore, they start at zero.
        delattr(checkpoint, RESIDUALS)
        try:
            return _restore_averaged(checkpoint, backup_dir, checkpoint_dir, optimizer, model)
        finally:
            setattr(checkpoint, RESIDUALS, residuals)
    return _restore_averaged(checkpoint, backup_dir, checkpoint_dir, optimizer, model)


def _restore_averaged(
    checkpoint: tf.train.Checkpoint,
    backup_dir: Path,
    checkpoint_dir: Path,
    optimizer: Any,
    model: Any,
) -> str | None:
    try:
        path = restore_newest(checkpoint, backup_dir, checkpoint_dir)
    except CheckpointError:
        averager = averager_of(optimizer)
        if averager is None:
            raise
    else:
        if path is not None and averager_of(optimizer) is None:
            _take_the_replicas_mean(path, optimizer, model)
        return path
    # Written under another `strategy.sync.mode` (or by a kdist without some of its
    # state): everything else is restored, and the averages start anew from the restored
    # weights (`WeightAverager.resume`, which `forget` forces).
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    delattr(inner, "kdist_weight_average")
    try:
        path = restore_newest(checkpoint, backup_dir, checkpoint_dir)
    finally:
        inner.kdist_weight_average = averager
    averager.forget()
    log.info("the checkpoint holds no state of this strategy.sync.mode: averaging anew")
    if path is not None:
        _take_the_replicas_mean(path, optimizer, model)
    return path


# Where a local SGD run's checkpoint keeps each replica's weights (`LocalSGDRunner`).
_BANKS = "kdist_weight_average/replica_weights/"
_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"


def _take_the_replicas_mean(path: str, optimizer: Any, model: Any) -> None:
    """A local SGD save between two averages, restored by a run that cannot give each
    replica its own weights back (`every_step`, another replica count): the weights it
    holds are the first replica's, so the model takes the mean of every replica's."""
    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    found = [k for k in shapes if k.endswith(f"{_BANKS}gathered_at{_VALUE}")]
    if not found or model is None:
        return
    prefix = found[0][: -len(f"gathered_at{_VALUE}")]
    if int(reader.get_tensor(found[0])) != optimizer_steps(model):
        return  # saved right after an average: the weights are the replicas' mean
    variables = [*(optimizer_variables(optimizer) or []), *running_statistics(model)]
    banks = [f"{prefix}banks/{i}{_VALUE}" for i in range(len(variables))]
    if f"{prefix}banks/{len(variables)}{_VALUE}" in shapes or not all(
        b in shapes and list(shapes[b][1:]) == list(v.shape)
        for b, v in zip(banks, variables, strict=True)
    ):
        log.warning(
            "%s was saved between two averages of strategy.sync, and its replicas' weights "
            "do not match this model's: resuming from the first replica's weights",
            path,
        )
        return
    for bank, variable in zip(banks, variables, strict=True):
        mean = reader.get_tensor(bank).mean(axis=0)
        variable.assign(mean.astype(tf.as_dtype(variable.dtype).as_numpy_dtype))
    log.info(
        "%s was saved between two averages of strategy.sync: resuming from the mean of its "
        "%d replicas' weights",
        path,
        shapes[banks[0]][0],
    )
