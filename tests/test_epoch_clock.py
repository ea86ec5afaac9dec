"""The epoch clock (`kdist.engine.epoch_clock`): the run's epoch numbers, checked against
the epochs written out step by step. (Keras's uneven epochs, `keras_epoch_lengths`, are
checked against Keras's own `fit` in `tests/test_keras_suite_cases.py`.)"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kdist.engine.epoch_clock import EpochClock, EpochNumbers

lengths = st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple)


def _epoch_of_each_step(clock: EpochClock, origin_epoch: int, steps: int) -> list[int]:
    """The epoch of each of the first `steps` steps from the origin, written out."""
    out: list[int] = []
    epoch = origin_epoch
    while len(out) < steps:
        out += [epoch] * clock.length(epoch - origin_epoch)
        epoch += 1
    return out[:steps]


@given(lengths, st.integers(0, 5), st.integers(0, 40), st.integers(0, 30))
def test_the_epoch_of_a_step_is_the_one_written_out(
    epoch_lengths: tuple[int, ...], origin_epoch: int, origin_step: int, steps: int
):
    clock = EpochClock(epoch_lengths)
    numbers = EpochNumbers(origin_epoch, origin_step)
    written = _epoch_of_each_step(clock, origin_epoch, steps + 1)
    for step, epoch in enumerate(written):
        assert numbers.epoch(origin_step + step, clock) == epoch
        # The epoch starts at the first step written out for it, and is that long.
        assert numbers.step_at(epoch, clock) == origin_step + written.index(epoch)
        assert numbers.length(epoch, clock) == clock.length(epoch - origin_epoch)


@given(lengths, st.integers(0, 30))
def test_new_data_starts_at_the_next_epoch_a_partial_one_done(
    epoch_lengths: tuple[int, ...], step: int
):
    clock = EpochClock(epoch_lengths)
    numbers = EpochNumbers(run_shift=2)
    moved = numbers.new_data(step, clock)
    partial = step != numbers.step_at(numbers.epoch(step, clock), clock)
    assert moved.origin_step == step and moved.run_shift == 2
    assert moved.origin_epoch == numbers.epoch(step, clock) + partial
    assert moved.epoch(step, clock) == moved.origin_epoch


def test_a_later_fit_restarts_keras_numbers_and_the_run_counts_on():
    clock = EpochClock((5,))
    numbers = EpochNumbers()
    assert numbers.epoch(15, clock) == 3  # three epochs trained
    again = numbers.started_at(0, 15, clock, again=True)  # fit(epochs=2) once more
    assert (again.epoch(15, clock), again.run_shift) == (0, 3)
    assert again.epoch(20, clock) + again.run_shift == 4  # the run's fifth epoch
    first = numbers.started_at(2, 0, clock)  # fit(initial_epoch=2) of a new model
    assert (first.epoch(0, clock), first.run_shift, first.step_at(4, clock)) == (2, 0, 10)
