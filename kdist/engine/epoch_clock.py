"""How long a run trains (`Schedule`), where its epochs begin and end in steps from the
start of a `fit`'s data (`EpochClock`), and which epoch a global step is in (`EpochNumbers`).

An epoch is `steps_per_epoch` steps, except where Keras's `fit` makes them differ: with
`steps_per_epoch` below the batches of data with an end, its `EpochIterator` goes on
through the data from one epoch to the next and ends an epoch early where a pass of the
data ends (the next epoch reads it afresh), each call taking `steps_per_execution`
batches while they last. The lengths then repeat with each pass (`keras_epoch_lengths`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kdist.data.given_pipeline import OPEN_EPOCH

__all__ = ["EpochClock", "EpochNumbers", "Schedule", "keras_epoch_lengths"]


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


@dataclass(frozen=True)
class EpochNumbers:
    """The run's one epoch clock: which epoch a global step is in, as Keras numbers the
    epochs of a `fit`, and as the run's own files number them. Pure: each change is a new
    value (`Controller.numbers`).

    Args:
        origin_epoch: the number of the epoch that starts at `origin_step`.
        origin_step: the global step where the epochs are counted from: 0, unless the data
            changed between two `fit` calls (`new_data`) or a `fit` set `initial_epoch`
            (`started_at`).
        run_shift: kdist's addition, the run's epoch number minus Keras's number of the
            same epoch: a later `fit(epochs=N)` numbers its epochs from `initial_epoch`
            again, as Keras does, while the run's files (history.csv, curves.png, the
            summary's epoch count) go on counting the run's epochs.
    """

    origin_epoch: int = 0
    origin_step: int = 0
    run_shift: int = 0

    def epoch(self, step: int, clock: EpochClock) -> int:
        """The epoch global step `step` belongs to (a partial epoch not counted as done)."""
        return self.origin_epoch + clock.epochs_done(step - self.origin_step)

    def length(self, epoch: int, clock: EpochClock) -> int:
        """The steps of epoch `epoch`."""
        return clock.length(epoch - self.origin_epoch)

    def steps_into_data(self, epoch: int, clock: EpochClock) -> int:
        """The steps from the data's start (the origin) to the start of epoch `epoch`."""
        return clock.steps_before(epoch - self.origin_epoch)

    def step_at(self, epoch: int, clock: EpochClock) -> int:
        """The global step at which epoch `epoch` starts (where a run of `epoch` epochs ends)."""
        return self.origin_step + self.steps_into_data(epoch, clock)

    def started_at(
        self, epoch: int, step: int, clock: EpochClock, *, again: bool = False
    ) -> EpochNumbers:
        """The next epoch, at global step `step`, is number `epoch` (`fit`'s `initial_epoch`).

        `again`: the model trained before in this run (a later `fit`): the run's files go
        on counting its epochs (`run_shift`), Keras's numbers restart.
        """
        shift = self.run_shift + (self.epoch(step, clock) - epoch if again else 0)
        return EpochNumbers(epoch, step, shift)

    def new_data(self, step: int, clock: EpochClock) -> EpochNumbers:
        """Data given anew at global step `step`: its epochs start at the next epoch (a
        partly trained epoch counts as done)."""
        steps = step - self.origin_step
        done = clock.epochs_done(steps)
        done += steps > clock.steps_before(done)
        return EpochNumbers(self.origin_epoch + done, step, self.run_shift)


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
