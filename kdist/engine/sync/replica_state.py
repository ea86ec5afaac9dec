"""Every replica's own state in a checkpoint: gathered before a save, spread after restore."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from kdist.compat.keras_private import learning_rate_variable
from kdist.compat.tf_private import host_variable

__all__ = ["ReplicaStates"]


class ReplicaStates(tf.Module):
    """Each replica's copy of some mirrored variables, held side by side for checkpoints.

    Between averages each replica's optimizer state (Adam's moments, momentum) and its
    weights are its own, but a mirrored variable saves only its first copy. Before a
    save `gather()` all-gathers every variable into a bank of shape
    `[replicas, *variable.shape]` (the same in every process, so the chief's checkpoint
    holds all of them); after a restore `spread()` gives each replica its own row back.
    A bank is a plain variable in host memory, one a process: a mirrored one would
    hold all the replicas' rows on every replica's device (under `MirroredStrategy` on
    8 GPUs, 8 rows of Adam's two moments and the weights on each GPU, 24 times the
    model).
    The bank records the step it was gathered at: `spread` only applies a bank of the
    step the run is at (a restore of that save), never an older one. Build it inside
    `strategy.scope()`.

    Args:
        strategy: the run's strategy.
        optimizer: the Keras optimizer whose slots are kept (not its iteration count or
            learning rate, which every replica shares); its `iterations` is the step
            unless `gather` and `spread` are given one.
        variables: keep these variables instead of the optimizer's slots (the weights).
            Defaults to the slots.
    """

    def __init__(
        self,
        *,
        strategy: tf.distribute.Strategy,
        optimizer: Any,
        variables: Sequence[Any] | None = None,
    ):
        super().__init__(name="kdist_replica_states")
        self._strategy = strategy
        self._optimizer = optimizer
        self._slots = optimizer_slots(optimizer) if variables is None else list(variables)
        replicas = strategy.num_replicas_in_sync
        self.banks = [
            host_variable(tf.zeros((replicas, *v.shape), v.dtype), name=f"replica_slot_{i}")
            for i, v in enumerate(self._slots)
        ]
        self.gathered_at = tf.Variable(tf.constant(-1, tf.int64), trainable=False)
        self._gather = tf.function(self._cross_replica_gather)
        self._spread = tf.function(self._cross_replica_spread)

    @property
    def empty(self) -> bool:
        """Whether the optimizer has no per-replica state (plain SGD)."""
        return not self._slots

    def gather(self, step: int | None = None) -> None:
        """Copy every replica's variables into the banks (before a save; every worker
        calls it), recording `step` (defaults to the optimizer's `iterations`)."""
        if self._slots:
            self._gather()
            self.gathered_at.assign(self._step(step))

    def spread(self, step: int | None = None) -> bool:
        """Give each replica its row of the banks, if they were gathered at `step`
        (defaults to the optimizer's `iterations`).

        Returns:
            Whether the banks were applied.
        """
        if not self._slots or int(self.gathered_at.numpy()) != self._step(step):
            return False
        self._spread()
        return True

    def _step(self, step: int | None) -> int:
        return int(self._optimizer.iterations.numpy()) if step is None else step

    def _cross_replica_gather(self) -> None:
        strategy = self._strategy
        gathered = strategy.run(self._replica_gather)
        for bank, value in zip(self.banks, gathered, strict=True):
            bank.assign(strategy.experimental_local_results(value)[0])  # every replica's

    def _replica_gather(self) -> list[tf.Tensor]:
        context = tf.distribute.get_replica_context()
        mine = [tf.expand_dims(tf.convert_to_tensor(_tf(v)), 0) for v in self._slots]
        return list(context.all_gather(mine, axis=0))

    def _cross_replica_spread(self) -> None:
        strategy = self._strategy
        rows = strategy.run(self._replica_row)
        for slot, value in zip(self._slots, rows, strict=True):
            strategy.extended.update(_tf(slot), _assign, args=(value,), group=False)

    def _replica_row(self) -> list[tf.Tensor]:
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        return [tf.gather(bank, replica) for bank in self.banks]  # the row, read on the host


def optimizer_slots(optimizer: Any) -> list[Any]:
    """`optimizer`'s own state per weight (its floating variables but the iteration
    count and the learning rate, which every replica shares)."""
    shared = [getattr(optimizer, "iterations", None), learning_rate_variable(optimizer)]
    return [
        v
        for v in optimizer.variables
        if all(v is not s for s in shared) and v.dtype in ("float32", "float64", "float16")
    ]


def _assign(variable: Any, value: tf.Tensor) -> Any:
    return variable.assign(value)


def _tf(variable: Any) -> Any:
    return variable.value if isinstance(variable, keras.Variable) else variable
