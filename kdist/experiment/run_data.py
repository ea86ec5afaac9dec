"""The config's data of an `Experiment`, built at its first use.

A notebook that hands `fit`, `evaluate` or `predict` its own data never needs the
config's `data.source` (the embedded digits by default): building it would read (or
download, for a real loader) data that the run never touches, and check the model
against it. `Experiment.source`, `steps_per_epoch` and `validates` are therefore made
when first read (`BuiltAtFirstUse`), from the config, unless data given to a call set
them first (`kdist.experiment.fit_call.use_data`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from kdist.data.pipeline import build_source
from kdist.data.pipeline import steps_per_epoch as steps_per_epoch_of
from kdist.data.source import Source
from kdist.experiment import batch_plan

__all__ = [
    "BuiltAtFirstUse",
    "config_source",
    "config_steps_per_epoch",
    "config_validates",
    "needs_total_steps",
]

T = TypeVar("T")


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
    """`trainer.steps_per_epoch`, or the full global batches of one pass of the source."""
    cfg = experiment.cfg
    batch = batch_plan.global_batch_size(cfg, experiment.num_replicas)
    return steps_per_epoch_of(experiment.source, batch, cfg.trainer.get("steps_per_epoch"))


def config_validates(experiment: Any) -> bool:
    """`trainer.validation`, where the source has validation examples."""
    return bool(experiment.cfg.trainer.validation) and experiment.source.size("validation") > 0


def needs_total_steps(cfg: Any) -> bool:
    """Whether the optimizer kdist builds from `cfg.optimizer` needs the run's length:
    a schedule whose `decay_steps` is left to the run (`kdist.modeling.schedules`)."""
    return cfg.optimizer.get("schedule") is not None and cfg.optimizer.get("decay_steps") is None
