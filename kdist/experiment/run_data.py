"""The data of a run: its plan (`DataPlan`), how big and how long it is (the global batch
over the replicas, `global_batch_size`, and the controller's `schedule`), the config's
source built at its first use, and the `dataset_fn` of a split (`run_dataset_fn`).

How a run reads its data is stated once, in a `DataPlan`. The config states it in keys
(`trainer.global_batch_size`, `data.shuffle`, ...); a notebook's `fit` call states it in its
arguments (`batch_size`, `shuffle`, ...), over the config's values, as each `model.fit` call
starts from its own arguments (`kdist.experiment.fit_arguments.plan_of`). Either way the
input pipeline, the schedule, the callbacks and `metrics.json` read this value: data given
to `fit` writes no config key. `DataPlan.recorded` is the one place that turns a plan back
into keys, for the run folder's `config.yaml` and its resume check.

A notebook that hands `fit`, `evaluate` or `predict` its own data never needs the
config's `data.source` (the embedded digits by default): building it would read (or
download, for a real loader) data that the run never touches, and check the model
against it. `Experiment.source`, `steps_per_epoch` and `validates` are therefore made
when first read (`BuiltAtFirstUse`), from the config, unless data given to a call set
them first (`kdist.experiment.fit_call.use_data`).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from kdist.config.compile_rules import check_class_weight
from kdist.config.errors import ConfigError
from kdist.data.given_pipeline import ENDLESS, partial_batches
from kdist.data.pipeline import DatasetFn, build_source, check_batch_split, make_dataset_fn
from kdist.data.pipeline import steps_per_epoch as steps_per_epoch_of
from kdist.data.source import ArraySource, Source
from kdist.engine.controller import Schedule

__all__ = [
    "BuiltAtFirstUse",
    "DataPlan",
    "check_split",
    "config_source",
    "config_steps_per_epoch",
    "config_validates",
    "global_batch_size",
    "needs_total_steps",
    "run_dataset_fn",
    "schedule",
    "steps_within_data",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class DataPlan:
    """The batch, order and length of a run's data, and how its validation reads.

    Attributes:
        global_batch_size: examples per step over all replicas
            (`trainer.global_batch_size`, after `per_replica_batch_size`).
        shuffle: a new order every epoch (`data.shuffle`).
        shuffle_buffer: examples the shuffle draws from (`data.shuffle_buffer`).
        cache: the examples are cached after their first pass (`data.cache`).
        steps_per_epoch: steps per epoch asked for, or `None`: one pass over the data
            (`trainer.steps_per_epoch`).
        class_weight: `{class id: weight}` for the input pipeline to apply
            (`trainer.class_weight`).
        validation_freq: validate every this many epochs (`trainer.validation_freq`).
        validation_steps: batches each validation reads, or `None`: all
            (`trainer.validation_steps`).
        validation_batch_size: examples per validation batch, or `None`: the training
            batch (`trainer.validation_batch_size`).
        given: what `config.yaml` records as `data.source` for data given to `fit`
            (`kdist.data.in_hand.given`, which says the data is not in the folder), or
            `None` for the config's own source.
    """

    global_batch_size: int
    shuffle: bool
    shuffle_buffer: int
    cache: bool
    steps_per_epoch: int | None = None
    class_weight: Mapping[int, float] | None = None
    validation_freq: int = 1
    validation_steps: int | None = None
    validation_batch_size: int | None = None
    given: Mapping[str, Any] | None = None

    @classmethod
    def of_config(cls, cfg: Any) -> DataPlan:
        """The plan a train config's keys state (its global batch already resolved,
        `global_batch_size`)."""
        trainer, data = cfg.trainer, cfg.data
        weights = trainer.get("class_weight")
        return cls(
            global_batch_size=int(trainer.global_batch_size),
            shuffle=bool(data.shuffle),
            shuffle_buffer=int(data.shuffle_buffer),
            cache=bool(data.cache),
            steps_per_epoch=_count(trainer.get("steps_per_epoch")),
            class_weight=_plain(weights) if weights is not None else None,
            validation_freq=int(trainer.get("validation_freq", 1)),
            validation_steps=_count(trainer.get("validation_steps")),
            validation_batch_size=_count(trainer.get("validation_batch_size")),
        )

    def recorded(self, cfg: DictConfig) -> DictConfig:
        """`cfg` as the run folder records the run: a copy with this plan's values at
        their keys (the config itself is left as it is). For `config.yaml` and the
        resume check, which compare what a run trained with."""
        if self == DataPlan.of_config(cfg):
            return cfg
        record = copy.deepcopy(cfg)
        keys: dict[str, Any] = {
            "trainer.global_batch_size": self.global_batch_size,
            "data.shuffle": self.shuffle,
            "data.shuffle_buffer": self.shuffle_buffer,
            "data.cache": self.cache,
            "trainer.steps_per_epoch": self.steps_per_epoch,
            "trainer.class_weight": self.class_weight or None,
            "trainer.validation_freq": self.validation_freq,
            "trainer.validation_steps": self.validation_steps,
            "trainer.validation_batch_size": self.validation_batch_size,
        }
        if self.global_batch_size != int(cfg.trainer.global_batch_size):
            keys["trainer.per_replica_batch_size"] = None  # the batch is the plan's
        if self.given is not None:
            keys["data.source"] = dict(self.given)
        for key, value in keys.items():
            parent_key, _, name = key.rpartition(".")
            parent = OmegaConf.select(record, parent_key)
            if parent.get(name) == value:
                continue
            with read_write(parent), open_dict(parent):
                parent[name] = value
        return record


def _count(value: Any) -> int | None:
    return int(value) if value else None


def _plain(weights: Any) -> Any:
    """A `class_weight` as a plain dict, its keys and values as given (the pipeline
    checks them: `kdist.config.compile_rules.check_class_weight`)."""
    if OmegaConf.is_config(weights):
        weights = OmegaConf.to_container(weights)
    return dict(weights) if isinstance(weights, Mapping) else weights


def global_batch_size(cfg: Any, num_replicas: int) -> int:
    """The global batch, split evenly over `num_replicas` (and `accumulate_steps`).

    `trainer.per_replica_batch_size`, when set, is written into the config as
    `trainer.global_batch_size`, so that the config's data plan
    (`DataPlan.of_config`) holds one number.

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


def run_dataset_fn(
    cfg: Any, plan: DataPlan, source: Source, split: str, skip_examples: int = 0
) -> DatasetFn:
    """The `dataset_fn` of a run's `split`: batch, order and weights from its `plan`.

    Training batches are micro-batches (`global_batch_size / trainer.accumulate_steps`)
    and carry the plan's `class_weight`; `skip_examples` is a resumed run's data
    position. `cfg` gives the rest of the pipeline (`data.shard_policy`, `data.augment`,
    `runtime.seed`).
    """
    batch = plan.global_batch_size
    train = split == "train"
    steps = None if train else plan.validation_steps
    if not train and plan.validation_batch_size:
        batch = plan.validation_batch_size  # Keras's `validation_batch_size`
    if not train and not steps and source.size(split) >= ENDLESS:
        # Keras's `fit` would validate forever (its `validation_steps` documentation).
        raise ConfigError(
            "validation_data",
            "is a dataset without end (repeat()): each validation would run forever",
            hint="pass validation_steps=N (the batches each validation reads), as in Keras",
        )
    if train:
        accumulate = int(cfg.trainer.get("accumulate_steps", 1))
        # Arrays whose passes split into whole global batches leave no partial batch.
        whole = isinstance(source, ArraySource) and source.size("train") % batch == 0
        if accumulate > 1 and partial_batches(source) and not whole:
            raise ConfigError(
                "trainer.accumulate_steps",
                "does not apply to data given to fit, whose partial last batch cannot be "
                "cut into micro-batches",
                value=accumulate,
                hint="leave it at 1, or use a data.source (e.g. data=npz)",
            )
        batch //= accumulate
    return make_dataset_fn(
        source,
        split,
        cfg.data,
        global_batch_size=batch,
        seed=int(cfg.runtime.seed),
        skip_examples=skip_examples,
        class_weight=check_class_weight(plan.class_weight) if train else None,
        validation_steps=steps,
        epoch_passes=train and not plan.steps_per_epoch,
        shuffle=plan.shuffle,
        shuffle_buffer=plan.shuffle_buffer,
        cache=plan.cache,
    )


class BuiltAtFirstUse(Generic[T]):
    """An instance attribute made by `make(instance)` when first read (unless set first).

    Args:
        make: what makes the value from the instance.
    """

    def __init__(self, make: Callable[[Any], T]):
        self._make = make
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = f"_{name}_value"

    @overload
    def __get__(self, instance: None, owner: type) -> BuiltAtFirstUse[T]: ...

    @overload
    def __get__(self, instance: object, owner: type) -> T: ...

    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is None:
            return self
        values = instance.__dict__
        if self._name not in values:
            values[self._name] = self._make(instance)
        return values[self._name]

    def __set__(self, instance: Any, value: T) -> None:
        instance.__dict__[self._name] = value


def config_source(experiment: Any) -> Source:
    """`data.source` built (`ConfigError` naming it for a source that cannot be made)."""
    return build_source(experiment.cfg.data.source)


def config_steps_per_epoch(experiment: Any) -> int:
    """The plan's `steps_per_epoch`, or the full global batches of one pass of the source."""
    plan = experiment.plan
    return steps_per_epoch_of(experiment.source, plan.global_batch_size, plan.steps_per_epoch)


def config_validates(experiment: Any) -> bool:
    """`trainer.validation`, where the source has validation examples."""
    return bool(experiment.cfg.trainer.validation) and experiment.source.size("validation") > 0


def needs_total_steps(cfg: Any) -> bool:
    """Whether the optimizer kdist builds from `cfg.optimizer` needs the run's length:
    a schedule whose `decay_steps` is left to the run (`kdist.modeling.schedules`)."""
    return cfg.optimizer.get("schedule") is not None and cfg.optimizer.get("decay_steps") is None
