"""How long a run trains (`Schedule`), and where its epochs begin and end in steps from
the start of a `fit`'s data (`EpochClock`).

An epoch is `steps_per_epoch` steps, except where Keras's `fit` makes them differ: with
`steps_per_epoch` below the batches of data with an end, its `EpochIterator` goes on
through the data from one epoch to the next and ends an epoch early where a pass of the
data ends (the next epoch reads it afresh), each call taking `steps_per_execution`
batches while they last. The lengths then repeat with each pass (`keras_epoch_lengths`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kdist.data.given_pipeline import OPEN_EPOCH

__all__ = ["EpochClock", "Schedule", "keras_epoch_lengths"]


@dataclass(frozen=True)
class EpochClock:
    """Epoch lengths in steps, `lengths` repeating from the origin (one pass each round).

    Args:
        lengths: the steps of consecutive epochs, one round of them.
    """

    lengths: tuple[int, ...]

    @property
    def round_steps(self) -> int:
        return sum(self.lengths)

    def length(self, epoch: int) -> int:
        """The steps of epoch `epoch` (counted from the origin)."""
        return self.lengths[epoch % len(self.lengths)]

    def steps_before(self, epochs: int) -> int:
        """The steps of the first `epochs` epochs."""
        rounds, rest = divmod(max(epochs, 0), len(self.lengths))
        return rounds * self.round_steps + sum(self.lengths[:rest])

    def epochs_done(self, steps: int) -> int:
        """The epochs that `steps` steps complete (a partial one not counted)."""
        rounds, rest = divmod(max(steps, 0), self.round_steps)
        done = rounds * len(self.lengths)
        for length in self.lengths:
            if rest < length:
                break
            rest -= length
            done += 1
        return done


def keras_epoch_lengths(batches: int, per_epoch: int, per_call: int) -> tuple[int, ...]:
    """The epoch lengths Keras's `EpochIterator` gives one pass of `batches` batches with
    `steps_per_epoch=per_epoch` and `steps_per_execution=per_call` (each call reads up to
    `per_call` batches; an epoch stops once the pass is read, the next starts it anew).
    `(per_epoch,)` when every epoch is whole."""
    lengths: list[int] = []
    seen = 0
    while True:
        taken = 0
        for _ in range(0, per_epoch, per_call):
            if seen >= batches:
                break
            taken += min(per_call, batches - seen)
            seen += per_call
        lengths.append(taken)
        if seen >= batches:
            break
    if all(length == per_epoch for length in lengths):
        return (per_epoch,)
    return tuple(lengths)


@dataclass(frozen=True)
class Schedule:
    """How long a run trains and how its steps are grouped.

    Args:
        epochs: epoch to stop at.
        steps_per_epoch: optimizer steps per epoch.
        steps_per_execution: most steps per runner call.
        global_batch_size: examples per optimizer step over all replicas.
        validation_freq: `fit`'s `validation_freq`: validate after the epochs whose
            1-based number it divides, or (a list) that it holds
            (`Trainer._should_eval`).
        validate_last: validate after the last epoch too (`trainer.validation_freq`'s
            documented meaning on the command line, so that `metrics.json` and a
            sweep's objective have validation metrics); `fit(validation_freq=...)` in a
            notebook sets it false, as Keras has no such rule.
    """

    epochs: int
    steps_per_epoch: int
    steps_per_execution: int
    global_batch_size: int
    validation_freq: int | list[int] = 1
    validate_last: bool = True
    epoch_lengths: tuple[int, ...] | None = None  # Keras's uneven epochs (epoch_clock)

    @property
    def open_ended(self) -> bool:
        """Its epochs end where the data ends (`kdist.data.given_pipeline.OPEN_EPOCH`)."""
        return self.steps_per_epoch >= OPEN_EPOCH

    @property
    def clock(self) -> EpochClock:
        return EpochClock(self.epoch_lengths or (self.steps_per_epoch,))

    @property
    def total_steps(self) -> int:
        return self.clock.steps_before(self.epochs)
