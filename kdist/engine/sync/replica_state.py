"""Every replica's optimizer state in a checkpoint: gathered before a save, spread after restore."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

__all__ = ["ReplicaStates"]


class ReplicaStates(tf.Module):
    """Each replica's copy of the optimizer's slots, held side by side for checkpoints.

    Between averages each replica's optimizer state (Adam's moments, momentum) is its
    own, but a mirrored variable saves only its first copy. Before a save `gather()`
    all-gathers every slot into a mirrored bank of shape `[replicas, *slot.shape]` (the
    same on every replica, so the chief's checkpoint holds all of them); after a restore
    `spread()` gives each replica its own row back. The bank records the optimizer step
    it was gathered at: `spread` only applies a bank of the step the optimizer is at (a
    restore of that save), never an older one. Build it inside `strategy.scope()`.

    Args:
        strategy: the run's strategy.
        optimizer: the Keras optimizer whose slots are kept (not its iteration count or
            learning rate, which every replica shares).
    """

    def __init__(self, *, strategy: tf.distribute.Strategy, optimizer: Any):
        super().__init__(name="kdist_replica_states")
        self._strategy = strategy
        self._optimizer = optimizer
        shared = [
            getattr(optimizer, "iterations", None),
            getattr(optimizer, "_learning_rate", None),
        ]
        self._slots = [
            v
            for v in optimizer.variables
            if all(v is not s for s in shared) and v.dtype in ("float32", "float64", "float16")
        ]
        replicas = strategy.num_replicas_in_sync
        self.banks = [
            tf.Variable(
                tf.zeros((replicas, *v.shape), v.dtype), trainable=False, name=f"replica_slot_{i}"
            )
            for i, v in enumerate(self._slots)
        ]
        self.gathered_at = tf.Variable(tf.constant(-1, tf.int64), trainable=False)
        self._gather = tf.function(self._cross_replica_gather)
        self._spread = tf.function(self._cross_replica_spread)

    @property
    def empty(self) -> bool:
        """Whether the optimizer has no per-replica state (plain SGD)."""
        return not self._slots

    def gather(self) -> None:
        """Copy every replica's slots into the banks (before a save; every worker calls it)."""
        if self._slots:
            self._gather()

    def spread(self) -> bool:
        """Give each replica its row of the banks, if they were gathered at this step.

        Returns:
            Whether the banks were applied.
        """
        step = int(self._optimizer.iterations.numpy())
        if not self._slots or int(self.gathered_at.numpy()) != step:
            return False
        self._spread()
        return True

    def _cross_replica_gather(self) -> None:
        strategy = self._strategy
        gathered = strategy.run(self._replica_gather)
        for bank, value in zip(self.banks, gathered, strict=True):
            strategy.extended.update(bank, _assign, args=(value,), group=False)
        self.gathered_at.assign(tf.cast(_tf(self._optimizer.iterations), tf.int64))

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
        return [tf.gather(tf.convert_to_tensor(bank), replica) for bank in self.banks]


def _assign(variable: Any, value: tf.Tensor) -> Any:
    return variable.assign(value)


def _tf(variable: Any) -> Any:
    return variable.value if isinstance(variable, keras.Variable) else variable
