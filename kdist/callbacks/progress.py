"""What the console says while a run trains: `ProgressBar` and `ClusterSpeed`.

`ProgressBar`: Keras's progress bar in a terminal, one plain line per epoch elsewhere.

In a terminal or a notebook the bar redraws itself (Keras's `Progbar`, with steps/s and
examples/s instead of ms/step). Written to a file, a pipe, a pod's log or the launcher's
`[worker N]` lines, a redrawn bar leaves ANSI colours, carriage returns and backspaces
behind, so there each epoch is one plain line in the shape of Keras's `verbose=2`:

```
Epoch 2/3 - 10/10 steps - 0.4s - steady 250 steps/s, 16,000 examples/s - loss: 0.4521
```

Both say what their rate measures: `steady` leaves out the first train call of the
`fit` (where the train function is traced and compiled) and validation; `incl. first call`
marks a rate that could not leave it out (an epoch whose only call was that one). The
summary `kdist.train` logs at the end (`examples_per_sec` of `metrics.json`) is another
measure: the whole run, first call and validation included.

`ClusterSpeed`: one line, in a local cluster, saying what one process must beat.

`kdist.launch` starts every task of a local cluster on the same machine, where a cluster
is often slower than one process using all the cores (benchmarks/README.md, the scaling
suite). The chief of such a run prints, once, after its first timed epoch (the second:
the first traces the functions and connects the cluster), the examples per second the
cluster trained and the rate one process on the same machine would need to beat it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

from kdist.runs.log_file import to_log_files

__all__ = [
    "ClusterSpeed",
    "ProgressBar",
    "epoch_line",
    "is_terminal",
]


def _rate(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _value(value: Any) -> str:
    """A metric as Keras's bar shows it: 4 decimals, or 4 significant digits when tiny."""
    number = float(np.mean(value))
    return f"{number:.4f}" if abs(number) > 1e-3 else f"{number:.4e}"


def is_terminal(stream: Any = None) -> bool:
    """Whether `stream` (`sys.stdout` by default) shows a redrawn bar as one bar.

    A terminal (`isatty()`) or a Jupyter kernel does; a file, a pipe (the launcher's
    workers, `kubectl logs`, `tee`) does not.
    """
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        if isatty is not None and isatty():
            return True
    except ValueError:  # a closed stream
        return False
    return "ipykernel" in sys.modules


def epoch_line(
    *,
    epoch: int,
    epochs: int,
    step: int,
    steps: int | None,
    seconds: float,
    steps_per_second: float | None,
    examples_per_step: int,
    steady: bool,
    logs: Mapping[str, Any] | None,
) -> str:
    """One epoch as one plain line: no ANSI code, carriage return or backspace.

    Args:
        epoch: the epoch, 0-based (shown 1-based, as Keras does).
        epochs: the run's epochs.
        step: steps done in the epoch.
        steps: steps in an epoch. `None` when unknown.
        seconds: the epoch's time, validation included.
        steps_per_second: the training rate. `None` when nothing was measured.
        examples_per_step: examples in one step over all replicas (the global batch).
        steady: the rate leaves out the fit's first call (tracing and compiling); if
            not, it is labelled `incl. first call`.
        logs: the epoch's metrics (`val_` ones included).

    Returns:
        The line, without a line break.
    """
    parts = [f"Epoch {epoch + 1}/{epochs}", f"{step}/{steps if steps else step} steps"]
    parts.append(f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s")
    if steps_per_second:
        examples = steps_per_second * examples_per_step
        rate = f"{_rate(steps_per_second)} steps/s, {_rate(examples)} examples/s"
        parts.append(f"steady {rate}" if steady else f"{rate} incl. first call")
    for name, value in (logs or {}).items():
        try:
            parts.append(f"{name}: {_value(value)}")
        except (TypeError, ValueError):
            continue  # not a number
    return " - ".join(parts)


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
        steady = self._first is not None and self._last_step > self._first[1]
        rate = f"{_rate(self.steps_per_second)} steps/s, {_rate(examples)} examples/s"
        return f" steady {rate}" if steady else f" {rate} incl. first call"


class ProgressBar(keras.callbacks.ProgbarLogger):
    """Progress per epoch: a bar in a terminal, one plain line in a file.

    Use it like `keras.callbacks.ProgbarLogger`; `keras.callbacks.CallbackList` does not
    add its own bar when one is in the list. kdist adds it on the chief only. With
    `verbose=1` it draws Keras's bar (steps, ETA, steps/s, examples/s, the metrics) when
    standard output is a terminal or a notebook, and writes one line per epoch
    (`epoch_line`) when it is not; `verbose=2` always writes the lines.

    Args:
        examples_per_step: examples in one step over all replicas (the global batch).
        terminal: draw the bar at `verbose=1`. Defaults to `None`: `is_terminal()` when
            training begins.

    Raises:
        ValueError: for a non-positive `examples_per_step`.
    """

    def __init__(self, *, examples_per_step: int, terminal: bool | None = None):
        super().__init__()
        if int(examples_per_step) < 1:
            raise ValueError(
                f"`examples_per_step` ({examples_per_step}) must be a positive integer."
            )
        self.examples_per_step = int(examples_per_step)
        self.terminal = terminal
        self.progbar: keras.utils.Progbar | None = None
        self._lines = False
        # Line mode: the epoch's start, the steady window's start and its last point.
        self._epoch_start = 0.0
        self._window: tuple[float, int] | None = None
        self._last: tuple[float, int] | None = None
        self._first_call_done = False
        self._steady = False

    # -- the mode ------------------------------------------------------------------------

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        super().on_train_begin(logs)
        terminal = is_terminal() if self.terminal is None else self.terminal
        self._lines = self.verbose == 2 or (self.verbose == 1 and not terminal)
        self._first_call_done = False

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        # The epoch's line is made in both modes: stdout shows it (line mode) or the bar,
        # and `train.log` holds it either way.
        self._epoch_start = time.perf_counter()
        self._window = self._last = None
        self._steady = False
        if not self._lines:
            super().on_epoch_begin(epoch, logs)
            return
        self.seen, self.progbar = 0, None

    # -- line mode (the timing is kept in bar mode too, for train.log's line) -----------

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._window is None and self._first_call_done:
            self._window = (time.perf_counter(), batch)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.perf_counter()
        # Keras names a partial last call's batch `begin + steps_per_execution - 1`, past
        # the epoch's end: the steps done are at most the epoch's.
        done = batch + 1 if not self.target else min(batch + 1, int(self.target))
        self._last = (now, done)
        if not self._first_call_done:
            # The fit's first call traces and compiles: the steady rate starts after it.
            self._first_call_done = True
            self._window = (now, done)
        if not self._lines:
            super().on_train_batch_end(batch, logs)
            return
        self.seen = done

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.perf_counter()
        if not self._lines:
            super().on_epoch_end(epoch, logs)
        rate, steady = None, False
        if self._last is not None:
            end_time, end_step = self._last
            start_time, start_step = self._window or (self._epoch_start, 0)
            if end_step > start_step:
                rate, steady = (end_step - start_step) / max(end_time - start_time, 1e-9), True
            else:  # the epoch's only call was the fit's first
                rate = end_step / max(end_time - self._epoch_start, 1e-9)
        line = epoch_line(
            epoch=epoch,
            epochs=int(self.epochs),
            step=self._last[1] if self._last is not None else self.seen,
            steps=self.target,
            seconds=now - self._epoch_start,
            steps_per_second=rate,
            examples_per_step=self.examples_per_step,
            steady=steady,
            logs=logs,
        )
        if self._lines:
            print(line, flush=True)
        to_log_files(line)  # train.log holds the epoch's line whatever stdout shows

    # -- bar mode ------------------------------------------------------------------------

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


class ClusterSpeed(keras.callbacks.Callback):
    """Print the cluster's examples/s after the first timed epoch, once.

    Args:
        examples_per_step: the global batch.
        workers: training workers of the cluster.
        ps: parameter servers of the cluster. Defaults to `0`.
        timed_epoch: the (0-based) epoch that is timed; earlier ones trace and connect.
            Defaults to `1`.

    Raises:
        ValueError: for a non-positive `examples_per_step` or `workers`.
    """

    def __init__(self, *, examples_per_step: int, workers: int, ps: int = 0, timed_epoch: int = 1):
        super().__init__()
        for name, value in (("examples_per_step", examples_per_step), ("workers", workers)):
            if int(value) < 1:
                raise ValueError(f"`{name}` ({value}) must be a positive integer.")
        self.examples_per_step = int(examples_per_step)
        self.workers = int(workers)
        self.ps = int(ps)
        self.timed_epoch = int(timed_epoch)
        self._started: float | None = None
        self._first_step: int | None = None
        self.printed: str | None = None

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch == self.timed_epoch and self.printed is None:
            self._started = time.perf_counter()
            self._first_step = self._step()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._started is None or self._first_step is None or self.printed is not None:
            return
        seconds = time.perf_counter() - self._started
        steps = self._step() - self._first_step
        if steps <= 0 or seconds <= 0:
            return
        rate = steps * self.examples_per_step / seconds
        shape = f"{self.workers} worker(s)" + (f" + {self.ps} ps" if self.ps else "")
        self.printed = (
            f"kdist.launch: this local cluster ({shape}) trained {rate:,.0f} examples/s in "
            f"epoch {epoch + 1}; one process on this machine beats it above {rate:,.0f} "
            f"examples/s ({rate / self.workers:,.0f} per worker): compare with the same "
            "overrides and strategy=one_device"
        )
        print(self.printed, flush=True)
