"""Where a run stands, saved with every checkpoint, and how to read it back.

A checkpoint holds the model (with every optimizer it holds), the optimizer, the training
metrics' running state, the model's random seed generators (`seed_states`) and a
`TrainingState` (steps done, examples consumed, and the strategy that wrote it). Because
the input pipeline's order is fixed by the seed, "examples consumed" is the data position:
a resumed run skips exactly that many examples, so no batch is used twice or skipped,
under any strategy or replica count.

On restore kdist does not trust the `checkpoint` state file: it tries every `ckpt-N` from
the newest down and falls back, with a warning, past one that is truncated or corrupt. A
folder with no checkpoint starts fresh; a folder whose checkpoints all fail to read is an
error, never a silent fresh start.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from kdist.compat.keras_private import flatten_layers, seed_generators

__all__ = [
    "CheckpointError",
    "ResumePoint",
    "TrainingState",
    "checkpoints_in",
    "describe_resume",
    "restore_latest",
    "restore_newest",
    "resume_point",
    "seed_states",
    "state_file_readable",
]

log = logging.getLogger(__name__)

_CKPT = re.compile(r"^ckpt-(\d+)\.index$")


class CheckpointError(RuntimeError):
    """A checkpoint folder holds checkpoints but none of them can be restored."""


def seed_states(model: Any) -> tf.Module:
    """The states of every `keras.random.SeedGenerator` in `model`, for its checkpoint.

    A GAN's noise, a VAE's sampling and dropout draw from seed generators whose state
    advances every step; Keras does not track them as checkpoint dependencies, so a
    resumed run would draw the first steps' noise again.
    """
    module = tf.Module(name="kdist_seed_generators")
    module.states = [
        generator.state.value
        for layer in flatten_layers(model)
        for generator in seed_generators(layer)
    ]
    return module


class TrainingState(tf.Module):
    """Where training stands, saved with every checkpoint.

    Build it outside `strategy.scope()`: these are plain host variables, identical on
    every worker, and so readable by any strategy that restores them.

    Args:
        strategy_name: the strategy's class name, e.g. `"MirroredStrategy"`.
        num_replicas: replicas in sync.
        global_batch_size: examples per step over all replicas.
    """

    def __init__(self, *, strategy_name: str, num_replicas: int, global_batch_size: int):
        super().__init__(name="kdist_training_state")
        self.steps = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.examples = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.global_batch_size = tf.Variable(global_batch_size, dtype=tf.int64, trainable=False)
        self.num_replicas = tf.Variable(num_replicas, dtype=tf.int64, trainable=False)
        self.strategy_name = tf.Variable(strategy_name, dtype=tf.string, trainable=False)
        self._batch = global_batch_size

    def advance_to(self, steps: int) -> None:
        """Record that `steps` steps of the current global batch are done in total."""
        self.record(tf.constant(steps, tf.int64))

    def record(self, steps: tf.Tensor) -> None:
        """`advance_to` for an int64 tensor; also inside a `tf.function` (see its savers)."""
        self.examples.assign_add((steps - self.steps) * self._batch)
        self.steps.assign(steps)


@dataclass(frozen=True)
class ResumePoint:
    """What a restored checkpoint says about where to continue."""

    path: str
    steps: int
    examples: int
    saved_by: str
    saved_replicas: int
    saved_batch: int


def checkpoints_in(directory: Path) -> list[tuple[int, str]]:
    """`(step, path)` of each `ckpt-N` in `directory`, the newest first."""
    found = []
    if directory.is_dir():
        for entry in directory.iterdir():
            match = _CKPT.match(entry.name)
            if match:
                found.append((int(match.group(1)), str(directory / f"ckpt-{match.group(1)}")))
    return sorted(found, reverse=True)


def state_file_readable(directory: Path) -> bool:
    if not (directory / "checkpoint").exists():
        return True
    # TensorFlow logs a parse error and answers None for an unreadable state file.
    return tf.train.get_checkpoint_state(str(directory)) is not None


def restore_latest(checkpoint: tf.train.Checkpoint, directory: Path) -> str | None:
    """Restore the newest readable checkpoint of `directory` into `checkpoint`.

    Args:
        checkpoint: what to restore into.
        directory: the checkpoint folder.

    Returns:
        The restored checkpoint's path, or `None` when the folder holds no checkpoint.

    Raises:
        CheckpointError: when checkpoints exist but none can be read.
    """
    candidates = checkpoints_in(directory)
    if not candidates:
        leftovers = [p.name for p in directory.glob("ckpt-*")] if directory.is_dir() else []
        if any(name.endswith(".data-00000-of-00001") for name in leftovers):
            raise CheckpointError(
                f"{directory} holds checkpoint data ({', '.join(sorted(leftovers))}) without "
                "an index file; restore it or move it away to start fresh"
            )
        return None
    errors = []
    for number, path in candidates:
        try:
            # What the checkpoint holds beyond `checkpoint` (its optional parts, read
            # apart: `kdist.engine.checkpoint.parts`) is left without a warning.
            checkpoint.restore(path).assert_existing_objects_matched().expect_partial()
        except Exception as error:  # DataLossError, OutOfRangeError, NotFoundError, ...
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            errors.append(f"ckpt-{number}: {type(error).__name__}: {first[:200]}")
            log.warning(
                "checkpoint %s cannot be restored (%s: %s); trying the previous one",
                path,
                type(error).__name__,
                first[:200],
            )
            continue
        if errors:
            log.warning("restored %s after skipping %d unreadable checkpoint(s)", path, len(errors))
        return path
    raise CheckpointError(
        f"none of the {len(candidates)} checkpoint(s) in {directory} can be restored: "
        + "; ".join(errors)
    )


def restore_newest(
    checkpoint: tf.train.Checkpoint, backup_dir: Path, checkpoint_dir: Path
) -> str | None:
    """Restore the newest readable backup, else the newest readable periodic checkpoint.

    A backup folder whose checkpoints are all unreadable (the newest one corrupt, and
    hard-linked to `checkpoints/` at the same step) falls back to `checkpoint_dir` with
    a warning, past the corrupt one to the intact ones before it.

    Returns:
        The restored path, or `None` when neither folder holds a checkpoint.

    Raises:
        CheckpointError: when checkpoints exist and none of either folder reads.
    """
    try:
        path = restore_latest(checkpoint, backup_dir)
    except CheckpointError as error:
        unreadable: CheckpointError | None = error
        path = None
        log.warning("%s; trying the periodic checkpoints", error)
    else:
        unreadable = None
    if path is not None:
        return path
    try:
        path = restore_latest(checkpoint, checkpoint_dir)
    except CheckpointError as error:
        raise CheckpointError(f"{unreadable}; {error}" if unreadable else str(error)) from None
    if path is None:
        if unreadable is not None:
            raise unreadable
        return None
    log.warning("no readable backup in %s: resuming from checkpoint %s", "backup/", path)
    return path


def describe_resume(
    point: ResumePoint, *, strategy_name: str, replicas: int, batch: int, steps_per_epoch: int
) -> str:
    """One log line saying how a checkpoint's position maps onto this run."""
    steps = point.examples // batch
    epoch, step = divmod(steps, steps_per_epoch)
    text = (
        f"resuming from {point.path}: saved by {point.saved_by} with {point.saved_replicas} "
        f"replica(s), global batch {point.saved_batch}, after {point.steps} steps "
        f"({point.examples} examples); now {strategy_name} with {replicas} replica(s), "
        f"global batch {batch}: continuing at step {steps} (epoch {epoch + 1}, "
        f"step {step} of {steps_per_epoch})"
    )
    if point.examples % batch:
        text += f"; {point.examples % batch} examples into a step (the batch size changed)"
    return text


def resume_point(state: TrainingState, path: str) -> ResumePoint:
    """The `ResumePoint` a restored `state` describes."""
    return ResumePoint(
        path=path,
        steps=int(state.steps.numpy()),
        examples=int(state.examples.numpy()),
        saved_by=state.strategy_name.numpy().decode(),
        saved_replicas=int(state.num_replicas.numpy()),
        saved_batch=int(state.global_batch_size.numpy()),
    )
