"""Every part of a run's checkpoint, in one place: what it holds, whether a checkpoint
must hold it, and how a run goes on when it does not.

Required (a checkpoint without one is refused):
- `model`: the weights, with every optimizer the model holds (a GAN's two);
- `optimizer`: the optimizer's slots, step and learning rate;
- `state`: `TrainingState`: steps, examples consumed (the data position), the strategy;
- `metrics`: the training metrics' running state;
- `seeds`: the model's seed generators (`seed_states`).

Optional (a checkpoint without one goes on without it):
- `allreduce_residuals`: the all-reduce's error-feedback residuals
  (`trainer.allreduce_dtype`); without them they start at zero;
- `weight_average`: `strategy.sync`'s averager: the anchor, the outer optimizer's
  momentum (DiLoCo), each replica's optimizer state and weights; without it (or with
  another mode's) the averages start anew from the restored weights.

"Refused": `restore_newest` falls back to an older checkpoint, then raises
`CheckpointError`. An optional part is restored when the checkpoint holds it, from the
same checkpoint as the rest. The two optional ones depend on settings that may change on
resume (`trainer.allreduce_dtype` with `trainer.allow_resume_changes`; `strategy.sync.*`):
a checkpoint of `every_step` holds no averager, one of `local_sgd` no outer momentum, and
one saved between two averages holds each replica's weights, of which a run that does not
average takes the mean. No part is attached to Keras's optimizer; checkpoints written
before this layout (kdist 2915c21 and before) kept the averager at
`optimizer/kdist_weight_average`, and still restore from there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from kdist.compat.keras_private import optimizer_variables
from kdist.engine.building import optimizer_steps
from kdist.engine.state import CheckpointError, TrainingState, restore_newest, seed_states
from kdist.engine.sync.averaging import WeightAverager, running_statistics

__all__ = [
    "AVERAGER",
    "AVERAGER_BEFORE",
    "RESIDUALS",
    "Part",
    "checkpoint_of",
    "restore_parts",
    "run_parts",
]

log = logging.getLogger(__name__)

RESIDUALS = "allreduce_residuals"
AVERAGER = "weight_average"
# Where checkpoints written by kdist 2915c21 and before hold the averager.
AVERAGER_BEFORE = "optimizer/kdist_weight_average"
_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"


@dataclass(frozen=True)
class Part:
    """One part of a run's checkpoint.

    Attributes:
        node: its name in the checkpoint.
        value: what it saves and restores (a trackable).
        restore: `None` for a required part (restored with the others, all or none);
            for an optional one, how it is read from a restored checkpoint: called with
            the checkpoint's path and its variable names, it returns whether the part
            was restored.
        start_anew: what an optional part does when it was not restored.
    """

    node: str
    value: Any
    restore: Callable[[str, set[str]], bool] | None = None
    start_anew: Callable[[], None] = lambda: None

    @property
    def required(self) -> bool:
        return self.restore is None


def run_parts(
    model: keras.Model, state: TrainingState, metrics: tf.Module, runner: Any
) -> list[Part]:
    """The parts of the checkpoint of a run that trains `model` with `runner` (table
    above): the optional ones are those the runner trains with (`runner.error_feedback`,
    `runner.averager`)."""
    parts = [
        Part("model", model),
        Part("optimizer", model.optimizer),
        Part("state", state),
        Part("metrics", metrics),
        Part("seeds", seed_states(model)),
    ]
    residuals = runner.error_feedback
    if residuals is not None:
        parts.append(
            Part(
                RESIDUALS,
                residuals,
                restore=lambda path, names: _read(RESIDUALS, residuals, path, names),
            )
        )
    averager = runner.averager
    if averager is not None:
        parts.append(
            Part(
                AVERAGER,
                averager,
                restore=lambda path, names: _read_averager(averager, path, names),
                start_anew=averager.forget,
            )
        )
    return parts


def checkpoint_of(parts: list[Part]) -> tf.train.Checkpoint:
    """The checkpoint that saves every part."""
    return tf.train.Checkpoint(**{part.node: part.value for part in parts})


def restore_parts(
    parts: list[Part], backup_dir: Path, checkpoint_dir: Path, *, model: keras.Model
) -> str | None:
    """Restore the newest readable backup (else periodic checkpoint) into `parts`.

    The required parts are restored together (`restore_newest`: past an unreadable
    checkpoint to an older one); each optional part then from the same checkpoint when
    it holds it, else it starts anew.

    Returns:
        The path restored, or `None` when neither folder holds a checkpoint.

    Raises:
        CheckpointError: when checkpoints exist and none reads.
    """
    required = tf.train.Checkpoint(**{p.node: p.value for p in parts if p.required})
    path = restore_newest(required, backup_dir, checkpoint_dir)
    if path is None:
        return None
    names = {name for name, _ in tf.train.list_variables(path)}
    averaged = False
    for part in parts:
        if part.restore is None:
            continue
        if part.restore(path, names):
            averaged = averaged or part.node == AVERAGER
            continue
        part.start_anew()
        if part.node == AVERAGER:
            log.info("the checkpoint holds no state of this strategy.sync.mode: averaging anew")
    if not averaged:
        _take_the_replicas_mean(path, names, model)
    return path


def _at(node: str, value: Any) -> tf.train.Checkpoint:
    """A checkpoint holding `value` at `node` (`a/b`: `b` of `a`), to restore it alone."""
    *outer, name = node.split("/")
    for parent in reversed(outer):
        holder = tf.Module(name=parent)
        setattr(holder, name, value)
        value, name = holder, parent
    return tf.train.Checkpoint(**{name: value})


def _read(node: str, value: Any, path: str, names: set[str]) -> bool:
    """Restore `value` from `node` of `path` if the checkpoint holds it (then wholly)."""
    if not any(name.startswith(f"{node}/") for name in names):
        return False
    try:
        _at(node, value).restore(path).assert_existing_objects_matched().expect_partial()
    except AssertionError as error:
        raise CheckpointError(f"{path} holds {node} of another shape: {error}") from None
    return True


def _read_averager(averager: WeightAverager, path: str, names: set[str]) -> bool:
    """The averager, from where the checkpoint holds it, when it was saved in this
    `strategy.sync.mode` (a checkpoint older than each replica's saved weights was saved
    right after an average, so without them)."""
    node = AVERAGER if any(n.startswith(f"{AVERAGER}/") for n in names) else AVERAGER_BEFORE
    if not any(name.startswith(f"{node}/") for name in names):
        return False
    value: Any = averager
    if node == AVERAGER_BEFORE:
        older = not any(name.startswith(f"{node}/replica_weights/") for name in names)
        value = averager.saved_state(replica_weights=not older)
    try:
        _at(node, value).restore(path).assert_existing_objects_matched().expect_partial()
    except AssertionError:
        return False  # another mode's averager (no outer momentum, or another replica count)
    return True


def _take_the_replicas_mean(path: str, names: set[str], model: keras.Model) -> None:
    """A local SGD save between two averages, restored by a run that cannot give each
    replica its own weights back (`every_step`, another replica count): the weights it
    holds are the first replica's, so the model takes the mean of every replica's."""
    found = [
        name
        for name in names
        if name.endswith(f"/replica_weights/gathered_at{_VALUE}")
        and name.split("/replica_weights/")[0] in (AVERAGER, AVERAGER_BEFORE)
    ]
    if not found:
        return
    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    prefix = found[0][: -len(f"gathered_at{_VALUE}")]
    if int(reader.get_tensor(found[0])) != optimizer_steps(model):
        return  # saved right after an average: the weights are the replicas' mean
    variables = [*(optimizer_variables(model.optimizer) or []), *running_statistics(model)]
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
