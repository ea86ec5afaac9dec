"""The private pieces of Keras's `fit` loop that kdist's controller calls as they are.

`kdist.engine.controller` transcribes `keras/src/backend/tensorflow/trainer.py` `fit`;
where Keras keeps a rule in a private name (when to validate, the epoch a restored
`BackupAndRestore` starts at), the controller calls Keras's own through this module, so
that a Keras upgrade that changes the rule changes kdist's too (or fails here, naming
the symbol: `kdist.compat.upstream.UpstreamMoved`; `PRIVATE_NAMES` says why each is used).
"""

from __future__ import annotations

from typing import Any

from kdist.compat.upstream import private_attribute, private_import

__all__ = ["batch_op_size", "initial_epoch_of", "should_eval"]

_CONTROLLER = "kdist.engine.controller.Controller"
_DATASETS = "kdist.data.in_hand.datasets.from_dataset"


def should_eval(epoch: int, validation_freq: Any) -> bool:
    """Whether `fit` validates after `epoch` (0-based), by Keras's `Trainer._should_eval`:
    `(epoch + 1) % freq == 0` for an integer, membership for a list (1-based epochs)."""
    trainer = private_import("keras.src.trainers.trainer", "Trainer", _CONTROLLER)
    rule = private_attribute(
        trainer, "_should_eval", "keras.src.trainers.trainer.Trainer._should_eval", _CONTROLLER
    )
    # The rule reads nothing of the model (`self` is unused), so it is called unbound.
    return bool(rule(None, epoch, validation_freq))


def batch_op_size(ds: Any) -> int | None:
    """The batch size of the nearest `batch`/`padded_batch` op up `ds`'s first inputs (the
    op's `_batch_size` tensor), or `None` when an `unbatch`/`rebatch` or no batch op comes
    first. Read from the dataset's graph: no iterator is made, so a seeded shuffle keeps
    the order `fit` would draw (`kdist.data.in_hand.datasets.from_dataset`)."""
    node = ds
    while node is not None:
        name = type(node).__name__
        if "Unbatch" in name or "Rebatch" in name:
            return None
        if name in ("_BatchDataset", "_ParallelBatchDataset", "_PaddedBatchDataset"):
            size = private_attribute(
                node, "_batch_size", "tf.data.Dataset.batch's _batch_size", _DATASETS
            )
            try:
                return int(size)
            except (TypeError, ValueError):  # not a constant (a symbolic tensor)
                return None
        inputs = [getattr(node, "_input_dataset", None)]
        inputs += list(getattr(node, "_input_datasets", None) or [])
        node = next((i for i in inputs if i is not None), None)
    return None


def initial_epoch_of(model: Any) -> int | None:
    """The epoch a Keras `BackupAndRestore` restored in `on_train_begin` (the model's
    `_initial_epoch`, which `fit` prefers to its `initial_epoch`), or `None`."""
    value = private_attribute(model, "_initial_epoch", "keras.Model._initial_epoch", _CONTROLLER)
    return None if value is None else int(value)
