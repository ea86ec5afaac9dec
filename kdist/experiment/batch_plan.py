"""How big and how long a run is: the global batch over the replicas, and the schedule."""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import open_dict, read_write

from kdist.config.errors import ConfigError
from kdist.data.pipeline import check_batch_split
from kdist.data.pipeline import steps_per_epoch as steps_per_epoch_of
from kdist.data.source import Source
from kdist.engine.controller import Schedule
from kdist.experiment.run_data import DataPlan

__all__ = ["check_split", "global_batch_size", "schedule", "steps_within_data"]

log = logging.getLogger(__name__)


def global_batch_size(cfg: Any, num_replicas: int) -> int:
    """The global batch, split evenly over `num_replicas` (and `accumulate_steps`).

    `trainer.per_replica_batch_size`, when set, is written into the config as
    `trainer.global_batch_size`, so that the config's data plan
    (`kdist.experiment.run_data.DataPlan.of_config`) holds one number.

    Raises:
        ConfigError: naming `trainer.global_batch_size` or `trainer.accumulate_steps`
            when the batch does not split evenly, with a value that would.
    """
    trainer = cfg.trainer
    per_replica = trainer.get("per_replica_batch_size")
    if per_replica is not None:
        with read_write(trainer), open_dict(trainer):
            trainer.global_batch_size = int(per_replica) * num_replicas
        log.info(
            "global batch %d = trainer.per_replica_batch_size %d x %d replica(s)",
            trainer.global_batch_size,
            per_replica,
            num_replicas,
        )
    elif num_replicas > 1 and cfg.optimizer.get("lr_scaling", "none") != "none":
        log.warning(
            "optimizer.lr_scaling=%s scales the learning rate by the %d replicas, but "
            "trainer.global_batch_size=%d stays fixed; set trainer.per_replica_batch_size "
            "(with trainer.global_batch_size=null) so the batch grows with them, or "
            "optimizer.lr_scaling=none",
            cfg.optimizer.lr_scaling,
            num_replicas,
            trainer.global_batch_size,
        )
    batch = int(trainer.global_batch_size)
    check_split(batch, num_replicas, int(trainer.get("accumulate_steps", 1)))
    return batch


def check_split(batch: int, num_replicas: int, accumulate: int) -> None:
    """Check that the global `batch` splits evenly over `num_replicas` and into
    `accumulate` micro-batches.

    Raises:
        ConfigError: naming `trainer.global_batch_size` or `trainer.accumulate_steps`,
            with a value that would split.
    """
    check_batch_split(batch, num_replicas)
    if accumulate > 1 and batch % (accumulate * num_replicas):
        raise ConfigError(
            "trainer.accumulate_steps",
            f"does not split the global batch of {batch} into micro-batches that the "
            f"{num_replicas} replica(s) share evenly",
            value=accumulate,
            hint=f"make trainer.global_batch_size a multiple of {accumulate} x "
            f"{num_replicas} = {accumulate * num_replicas}",
        )


def schedule(
    trainer: Any,
    plan: DataPlan,
    steps_per_epoch: int,
    *,
    steps_per_execution: int | None = None,
    epoch_lengths: tuple[int, ...] | None = None,
) -> Schedule:
    """The controller's `Schedule` for a `trainer` node and the run's data `plan`.

    `steps_per_execution` overrides `trainer.steps_per_execution` (a model's own compile);
    `epoch_lengths`, Keras's uneven epochs (`kdist.engine.epoch_clock`).
    """
    return Schedule(
        epochs=int(trainer.epochs),
        steps_per_epoch=steps_per_epoch,
        steps_per_execution=int(steps_per_execution or trainer.steps_per_execution),
        global_batch_size=plan.global_batch_size,
        validation_freq=plan.validation_freq,
        epoch_lengths=epoch_lengths,
    )


def steps_within_data(source: Source, global_batch: int, requested: int, *, endless: bool) -> int:
    """An epoch's steps of data given to `fit` with `steps_per_epoch=requested`.

    Keras's `EpochIterator`: an epoch of data with an end stops where the data runs out
    ("Your input ran out of data"), and the next epoch reads it afresh; so `requested`
    beyond the data's batches is the batches of one pass.
    """
    if endless:
        return requested
    batches = steps_per_epoch_of(source, global_batch, None)
    if batches >= requested:
        return requested
    log.warning(
        "steps_per_epoch=%d is more than the %d batches of the data given to fit: each "
        "epoch ends when the data runs out, as Keras's fit does",
        requested,
        batches,
    )
    return batches
