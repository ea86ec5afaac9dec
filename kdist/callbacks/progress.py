"""`ProgressBar`: Keras's progress bar, showing steps/s and examples/s instead of ms/step."""

from __future__ import annotations

import time
from typing import Any

import keras

__all__ = ["ProgressBar"]


def _rate(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


class _ThroughputProgbar(keras.utils.Progbar):
    """A `keras.utils.Progbar` that measures throughput from its second update on.

    Keras estimates the time per step from the first step when it is reported alone;
    kdist reports every `steps_per_execution` steps, so the first update would include
    tracing and compiling. Here the rate (and so the ETA) excludes the first update
    once a second one has arrived, and a repeated update at the same step (the epoch's
    final one, after validation) does not change it.
    """

    def __init__(self, *args: Any, examples_per_step: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.examples_per_step = examples_per_step
        self._first: tuple[float, int] | None = None
        self._last_step = 0
        self.steps_per_second: float | None = None

    def update(self, current: int, values: Any = None, finalize: bool | None = None) -> None:
        now = time.time()
        if current > self._last_step:
            if self._first is None:
                self._first = (now, current)
                self.steps_per_second = current / max(now - self._start, 1e-9)
            elif current > self._first[1]:
                first_time, first_step = self._first
                self.steps_per_second = (current - first_step) / max(now - first_time, 1e-9)
            self._last_step = current
        super().update(current, values, finalize)

    # Keras's hooks for the time per step and its display (private, so if a Keras
    # release renames them the bar falls back to Keras's own ms/step display).
    def _estimate_step_duration(self, current: int, now: float) -> float:
        if self.steps_per_second:
            return 1.0 / self.steps_per_second
        return float(super()._estimate_step_duration(current, now))

    def _format_time(self, time_per_unit: float, unit_name: str) -> str:
        if not self.steps_per_second:
            return str(super()._format_time(time_per_unit, unit_name))
        examples = self.steps_per_second * self.examples_per_step
        return f" {_rate(self.steps_per_second)} steps/s - {_rate(examples)} examples/s"


class ProgressBar(keras.callbacks.ProgbarLogger):
    """One progress bar per epoch: steps, ETA, steps/s, examples/s and the metrics.

    Use it like `keras.callbacks.ProgbarLogger`; `keras.callbacks.CallbackList` does not
    add its own bar when one is in the list. kdist adds it on the chief only.

    Args:
        examples_per_step: examples in one step over all replicas (the global batch).

    Raises:
        ValueError: for a non-positive `examples_per_step`.
    """

    def __init__(self, *, examples_per_step: int):
        super().__init__()
        if int(examples_per_step) < 1:
            raise ValueError(
                f"`examples_per_step` ({examples_per_step}) must be a positive integer."
            )
        self.examples_per_step = int(examples_per_step)
        self.progbar: keras.utils.Progbar | None = None

    def _maybe_init_progbar(self) -> None:
        if self.progbar is None:
            self.progbar = _ThroughputProgbar(
                target=self.target,
                verbose=self.verbose,
                # At most 10 redraws a second (tqdm's default; Keras redraws up to 20):
                # a redraw was a fifth of the training thread's time between calls.
                interval=0.1,
                unit_name="step",
                stateless_metrics=set(),
                examples_per_step=self.examples_per_step,
            )
