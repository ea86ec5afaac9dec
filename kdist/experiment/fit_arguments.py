"""`fit`'s arguments, stated once (`FitArguments`), and what they make of the run.

`FitArguments` holds `keras.Model.fit`'s arguments, in its order, with kdist's defaults
(a test compares its fields and `Experiment.fit`'s parameters with `keras.Model.fit`'s).
Each `fit` call's arguments make the run's data plan (`kdist.experiment.run_data.DataPlan`)
over the config's, as each `model.fit` call starts from its own arguments (`plan_of`); the
data itself becomes a source in `kdist.data.in_hand`. No config key is written.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from kdist.config.errors import ConfigError
from kdist.data.in_hand import Given, given_data
from kdist.data.in_hand.dispatch import DEFAULT_BATCH
from kdist.experiment.run_data import DataPlan

__all__ = [
    "FitArguments",
    "FitData",
    "check_count",
    "check_needs_x",
    "keras_limits",
    "plan_of",
    "read_fit_data",
    "same_args",
    "warn_stream_resume",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitArguments:
    """`keras.Model.fit`'s arguments, in its order, as `Experiment.fit` takes them.

    The defaults are kdist's where a config key stands behind the argument (`None`:
    the key's value, e.g. `epochs` -> `trainer.epochs`, `batch_size` ->
    `trainer.global_batch_size`); see `Experiment.fit` for each.
    """

    x: Any = None
    y: Any = None
    batch_size: int | None = None
    epochs: int | None = None
    verbose: int | None = None
    callbacks: Sequence[Any] = ()
    validation_split: float = 0.0
    validation_data: Any = None
    shuffle: bool | None = None
    class_weight: dict[int, float] | None = None
    sample_weight: Any = None
    initial_epoch: int = 0
    steps_per_epoch: int | None = None
    validation_steps: int | None = None
    validation_batch_size: int | None = None
    validation_freq: int | None = None

    def check(self) -> None:
        """Refuse counts that are not counts and arguments kdist does not take, before
        anything is set up.

        Raises:
            ConfigError: naming the argument.
        """
        for name in (
            "epochs",
            "batch_size",
            "steps_per_epoch",
            "validation_freq",
            "validation_steps",
            "validation_batch_size",
        ):
            check_count(name, getattr(self, name))
        initial = self.initial_epoch
        if isinstance(initial, bool) or not isinstance(initial, (int, np.integer)) or initial < 0:
            raise ConfigError("initial_epoch", "must be an integer >= 0", value=initial)


@dataclass(frozen=True)
class FitData:
    """What a `fit` call's data arguments make of the run (`read_fit_data`).

    Attributes:
        given: the data given to `fit` as a source, or `None` (the config's data).
        plan: the run's data plan for this call.
        args: the arguments, to tell the same data given again (`same_args`).
    """

    given: Given | None
    plan: DataPlan
    args: tuple[Any, ...]


def read_fit_data(
    arguments: FitArguments,
    *,
    strategy: Any,
    configured: DataPlan,
    previous: tuple[Any, ...],
    fitted_batch: int | None,
) -> FitData | None:
    """`fit`'s data arguments, checked, as the run's data and its plan.

    Args:
        arguments: the call's arguments (`x`, `y`, `batch_size`, `validation_split`,
            `validation_data`, `shuffle`, `class_weight`, `sample_weight`,
            `steps_per_epoch` and `validation_freq` are read here).
        strategy: the run's strategy (some cannot read some data).
        configured: the config's data plan (`DataPlan.of_config`).
        previous: the arguments of the last call that gave data (`FitData.args`).
        fitted_batch: the global batch of the steps trained so far, or `None` before
            the first `fit`.

    Returns:
        A `FitData`, or `None` when the call gives no data (the last call's, or the
        config's, goes on) or the same data again (its stream goes on where it is).

    Raises:
        ConfigError: naming the argument, for data that does not fit together, that
            the strategy cannot read, or a batch other than the one trained so far.
    """
    arguments.check()
    x, y = arguments.x, arguments.y
    validation_data, validation_split = arguments.validation_data, arguments.validation_split
    sample_weight, batch_size = arguments.sample_weight, arguments.batch_size
    shuffle, steps_per_epoch = arguments.shuffle, arguments.steps_per_epoch
    validation_freq, class_weight = arguments.validation_freq, arguments.class_weight
    validation_steps = arguments.validation_steps
    validation_batch_size = arguments.validation_batch_size
    check_needs_x(
        x,
        y=y,
        validation_data=validation_data,
        sample_weight=sample_weight,
        validation_split=validation_split,
    )
    args: tuple[Any, ...] = (x, y, validation_data, validation_split, sample_weight)
    args += (batch_size, shuffle, steps_per_epoch, validation_freq, class_weight)
    args += (validation_steps, validation_batch_size)
    if all(a is None or (isinstance(a, float) and a == 0.0) for a in args):
        return None
    if same_args(args, previous):
        return None
    given = None
    if x is not None:
        given = given_data(
            x,
            y,
            validation_data=validation_data,
            validation_split=validation_split,
            sample_weight=sample_weight,
            batch_size=batch_size,
            steps_per_epoch=steps_per_epoch,
            shuffle=shuffle,
            class_weight=class_weight,
            validation_steps=validation_steps,
            strategy=strategy,
        )
    plan = plan_of(
        given,
        configured,
        batch_size=batch_size,
        shuffle=shuffle,
        steps_per_epoch=steps_per_epoch,
        class_weight=class_weight,
        validation_freq=validation_freq,
        validation_steps=validation_steps,
        validation_batch_size=validation_batch_size,
    )
    new_batch = plan.global_batch_size
    if fitted_batch is not None and new_batch != fitted_batch:
        raise ConfigError(
            "batch_size",
            f"cannot change from {fitted_batch} between two fit calls of one Experiment: "
            "its checkpoints count the examples consumed in batches of that size",
            value=new_batch,
            hint="keep the batch, or make a new kdist.Experiment",
        )
    return FitData(given, plan, args)


def check_count(name: str, value: Any) -> None:
    """Refuse a count argument (`batch_size`, `steps_per_epoch`, `epochs`, ...) that is
    not a positive integer, before any training.

    Raises:
        ConfigError: naming `name`.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(name, "must be a positive integer", value=value)


def check_needs_x(
    x: Any, *, y: Any, validation_data: Any, sample_weight: Any, validation_split: float
) -> None:
    """Refuse data that goes with `x` when `fit` is given no `x`.

    Raises:
        ConfigError: naming the argument given without `x`.
    """
    if x is None:
        for name, value in (
            ("y", y),
            ("validation_data", validation_data),
            ("sample_weight", sample_weight),
            ("validation_split", validation_split or None),
        ):
            if value is not None:
                raise ConfigError(name, "needs x: give the data it goes with")


def plan_of(
    given: Given | None,
    configured: DataPlan,
    *,
    batch_size: int | None,
    shuffle: bool | None,
    steps_per_epoch: int | None,
    class_weight: dict[int, float] | None,
    validation_freq: int | None,
    validation_steps: int | None = None,
    validation_batch_size: int | None = None,
) -> DataPlan:
    """The data plan a `fit` call's arguments make, over the `configured` one.

    Args:
        given: the data given to `fit` (`kdist.data.in_hand.given_data`), or `None`.
        configured: the config's data plan (`DataPlan.of_config`).
        batch_size: `fit`'s `batch_size`.
        shuffle: `fit`'s `shuffle`.
        steps_per_epoch: `fit`'s `steps_per_epoch`.
        class_weight: `fit`'s `class_weight`.
        validation_freq: `fit`'s `validation_freq`.
        validation_steps: `fit`'s `validation_steps`. Defaults to `None`.
        validation_batch_size: `fit`'s `validation_batch_size`. Defaults to `None`: as
            Keras's `fit` (`validation_batch_size or batch_size`), `batch_size`, else 32
            where the training data brings its own batches and the validation data are
            examples (arrays), else the training batch.
    """
    changes: dict[str, Any] = {}
    if given is not None:
        class_weight = given.class_weight  # arrays carry theirs in their sample weights
        size = given.source.size("train")
        changes = {
            "shuffle": given.shuffle,
            "shuffle_buffer": max(size, 1),  # all of it, as Keras shuffles arrays
            "cache": given.kind == "arrays",  # a dataset's own pipeline runs each pass
            "given": {
                "_target_": "kdist.data.in_hand.given",
                "kind": given.kind,
                "train_examples": size,
                "validation_examples": given.source.size("validation"),
            },
        }
        if given.global_batch_size is not None:
            changes["global_batch_size"] = given.global_batch_size
        if validation_batch_size is None and batch_size is None and given.kind != "arrays":
            # Keras's `fit`: `batch_size=validation_batch_size or batch_size` for the
            # validation data, which arrays then batch by 32 (`ArrayDataAdapter`); a
            # dataset of batches keeps its own (`own_batches`).
            validation_batch_size = DEFAULT_BATCH
    elif shuffle is not None:
        changes["shuffle"] = bool(shuffle)
    if class_weight is not None:
        changes["class_weight"] = (
            dict(class_weight) if isinstance(class_weight, dict) else class_weight
        )
    for name, count in (
        ("global_batch_size", batch_size),
        ("steps_per_epoch", steps_per_epoch),
        ("validation_freq", validation_freq),
        ("validation_steps", validation_steps),
        ("validation_batch_size", validation_batch_size or batch_size),
    ):
        if count is not None:
            changes[name] = int(count)
    return dataclasses.replace(configured, **changes)


def warn_stream_resume(given: Given | None, steps_per_epoch: int, step: int) -> None:
    """Log how a dataset or stream given to `fit` resumes in the middle of an epoch.

    Arrays resume exactly (kdist's own shuffle is seeded); a dataset's or a stream's
    iterator is not in the checkpoint, so the epoch's first batches are read again
    and skipped, which repeats the epoch's order only when the data's own order is
    deterministic (no unseeded shuffle).
    """
    within = step % steps_per_epoch if steps_per_epoch else 0
    if given is None or given.kind == "arrays" or not within:
        return
    log.warning(
        "resuming in the middle of an epoch of a %s given to fit: its iterator is not "
        "checkpointed, so the epoch is read from its start and its first %d batch(es) "
        "skipped; this repeats the interrupted epoch only if the data's order is "
        "deterministic (seed any shuffle in the dataset)",
        given.kind,
        within,
    )


def same_args(args: tuple[Any, ...], before: tuple[Any, ...]) -> bool:
    """The same objects (arrays, datasets) and equal plain values, argument by argument."""

    def same(a: Any, b: Any) -> bool:
        if a is b:
            return True
        if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
            return len(a) == len(b) and all(same(i, j) for i, j in zip(a, b, strict=True))
        if isinstance(a, dict) and isinstance(b, dict):
            # A dict of arrays (inputs by name): the same objects key by key (`==` on
            # arrays is an array, whose truth NumPy refuses).
            return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
        plain = (int, float, bool, str)
        return isinstance(a, plain) and isinstance(b, plain) and a == b

    return len(args) == len(before) and all(same(a, b) for a, b in zip(args, before, strict=True))


def keras_limits(epochs: int | None, steps_per_epoch: int | None) -> tuple[Any, Any]:
    """`epochs` and `steps_per_epoch` within `keras.config.set_max_epochs` and
    `set_max_steps_per_epoch` (Keras's debugging caps), warned as Keras's `fit` warns."""
    max_epochs = keras.config.max_epochs()
    if max_epochs and epochs is not None and max_epochs < epochs:
        warnings.warn(f"Limiting epochs to {max_epochs}", stacklevel=3)
        epochs = max_epochs
    max_steps = keras.config.max_steps_per_epoch()
    if max_steps and (not steps_per_epoch or max_steps < steps_per_epoch):
        warnings.warn(f"Limiting steps_per_epoch to {max_steps}", stacklevel=3)
        steps_per_epoch = max_steps
    return epochs, steps_per_epoch
