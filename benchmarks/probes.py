"""Keras callbacks that benchmarked subprocesses load through `callbacks.extra`.

They print one marked line to stdout (never a file, so any task of a cluster may use
them); the benchmark parses the lines of the task it cares about. `TimeSplitProbe` is
the exception: each task writes its own file under the benchmark's folder.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import keras

__all__ = ["MARK", "SPLIT_CATEGORIES", "EpochTimer", "FirstStepMarker", "TimeSplitProbe", "parse"]

MARK = "kdist-bench"
_LINE = re.compile(rf"{MARK} (\w+) (.*)$")


def _emit(kind: str, **values: Any) -> None:
    fields = " ".join(f"{key}={value}" for key, value in values.items())
    print(f"{MARK} {kind} {fields}", flush=True)


class FirstStepMarker(keras.callbacks.Callback):
    """Prints the wall-clock time (`time.time()`) when the first train-function call ends."""

    def __init__(self) -> None:
        super().__init__()
        self._done = False

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if not self._done:
            self._done = True
            _emit("first_step", time=f"{time.time():.6f}")


class EpochTimer(keras.callbacks.Callback):
    """Prints each epoch's wall seconds (from `on_epoch_begin` to `on_epoch_end`).

    Args:
        steps_per_epoch: printed with each epoch, to compute examples per second.
        global_batch_size: printed too.
    """

    def __init__(self, *, steps_per_epoch: int, global_batch_size: int):
        super().__init__()
        self.steps_per_epoch = int(steps_per_epoch)
        self.global_batch_size = int(global_batch_size)
        self._started = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        seconds = time.perf_counter() - self._started
        _emit(
            "epoch",
            index=epoch,
            seconds=f"{seconds:.6f}",
            steps=self.steps_per_epoch,
            batch=self.global_batch_size,
        )


def parse(text: str, *, prefix: str = "") -> list[tuple[str, dict[str, str]]]:
    """The marked lines in `text` (of lines starting with `prefix`), as (kind, fields)."""
    found = []
    for line in text.splitlines():
        if prefix and not line.startswith(prefix):
            continue
        match = _LINE.search(line)
        if match:
            kind, rest = match.groups()
            fields = dict(item.split("=", 1) for item in rest.split() if "=" in item)
            found.append((kind, fields))
    return found


# -- the time split (`benchmarks.time_split`) ------------------------------------------

SPLIT_CATEGORIES = ("step", "average", "read", "callbacks")


class _SplitRecorder:
    """Timestamps (`time.perf_counter`, the system-wide monotonic clock on Linux, so the
    workers' stamps compare) of the calls made during one epoch, kept in memory."""

    def __init__(self) -> None:
        self.epoch = 1
        self.active = False
        self.window: list[float] = []
        self.events: list[tuple[str, float, float]] = []
        self.cpu_at_start: dict[str, tuple[str, float]] = {}
        self.cpu: dict[str, float] = {}

    def add(self, category: str, start: float) -> None:
        if self.active:
            self.events.append((category, start, time.perf_counter()))


_SPLIT = _SplitRecorder()


def thread_cpu() -> dict[str, tuple[str, float]]:
    """Each thread of this process: thread id -> (kind, CPU seconds so far), from
    `/proc/self/task` (empty where there is none). The kinds: `main` (the thread that runs
    Python's loop), `compute` (TensorFlow's op pools: `tf_Compute`, `tf_*`, and Eigen's
    unnamed intra-op threads) and `other` (gRPC, the collective executor, the writer)."""
    found: dict[str, tuple[str, float]] = {}
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return found
    tick = os.sysconf("SC_CLK_TCK")
    main = str(os.getpid())
    read: dict[str, tuple[str, float]] = {}
    for task in tasks.iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended
        fields = stat[stat.rindex(")") + 2 :].split()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        read[task.name] = (name, (int(fields[11]) + int(fields[12])) / tick)
    # Threads a library starts without naming them keep the process's name: Eigen's
    # intra-op pool, which runs the ops' kernels (and any Python thread: the benchmark
    # jobs start none in the measured epoch).
    unnamed = read.get(main, ("", 0.0))[0]
    for tid, (name, seconds) in read.items():
        if tid == main:
            kind = "main"
        elif name.startswith("tf_") or name == unnamed:
            kind = "compute"
        else:
            kind = "other"
        found[tid] = (kind, seconds)
    return found


def cpu_between(
    before: dict[str, tuple[str, float]], after: dict[str, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds by kind of thread between two `thread_cpu` readings (a thread that
    started between them counts from 0; one that ended counts no more)."""
    spent = {"main": 0.0, "compute": 0.0, "other": 0.0}
    for tid, (kind, seconds) in after.items():
        spent[kind] += seconds - before.get(tid, (kind, 0.0))[1]
    return spent


def _timed(owner: Any, name: str, category: str) -> None:
    """Wrap `owner.name` (a class's method) so that each call is recorded as `category`."""
    original = getattr(owner, name)
    if getattr(original, "_kdist_split", False):
        return

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            _SPLIT.add(category, start)

    wrapper._kdist_split = True  # type: ignore[attr-defined]
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, name, wrapper)


def _as_floats(logs: Any) -> Any:
    """The batch logs as Python floats (what Keras's `CallbackList` converts them to),
    timed as a read; logs that are not a dict of scalars pass unchanged."""
    if not isinstance(logs, dict):
        return logs
    try:
        return {key: float(value) for key, value in logs.items()}
    except (TypeError, ValueError):
        return logs


def _time_callback_list() -> None:
    """Time the controller's callback hooks (`keras.callbacks.CallbackList`), open the
    window at the measured epoch's `on_epoch_begin` and close it after its `on_epoch_end`."""
    hooks = keras.callbacks.CallbackList
    if getattr(hooks.on_epoch_begin, "_kdist_split", False):
        return
    epoch_begin, epoch_end = hooks.on_epoch_begin, hooks.on_epoch_end
    batch_begin, batch_end = hooks.on_train_batch_begin, hooks.on_train_batch_end

    def on_epoch_begin(self: Any, epoch: int, logs: Any = None) -> None:
        start = time.perf_counter()
        if epoch == _SPLIT.epoch:
            _SPLIT.active = True
            _SPLIT.window = [start]
            _SPLIT.cpu_at_start = thread_cpu()
        epoch_begin(self, epoch, logs)
        _SPLIT.add("callbacks", start)

    def on_epoch_end(self: Any, epoch: int, logs: Any = None) -> None:
        start = time.perf_counter()
        epoch_end(self, epoch, logs)
        _SPLIT.add("callbacks", start)
        if epoch == _SPLIT.epoch and _SPLIT.active:
            _SPLIT.active = False
            _SPLIT.window.append(time.perf_counter())
            _SPLIT.cpu = cpu_between(_SPLIT.cpu_at_start, thread_cpu())

    def on_train_batch_begin(self: Any, batch: int, logs: Any = None) -> None:
        start = time.perf_counter()
        batch_begin(self, batch, logs)
        _SPLIT.add("callbacks", start)

    def on_train_batch_end(self: Any, batch: int, logs: Any = None) -> None:
        start = time.perf_counter()
        logs = _as_floats(logs)
        _SPLIT.add("read", start)
        batch_end(self, batch, logs)
        _SPLIT.add("callbacks", start)

    for hook in (on_epoch_begin, on_epoch_end, on_train_batch_begin, on_train_batch_end):
        hook._kdist_split = True  # type: ignore[attr-defined]
        setattr(hooks, hook.__name__, hook)


def _task_name() -> str:
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task") or {}
    return f"{task.get('type', 'single')}-{task.get('index', 0)}"


class TimeSplitProbe(keras.callbacks.Callback):
    """Records where one epoch's time goes in this process, for `benchmarks.time_split`.

    Benchmark-only: it wraps, in this process, `StandardRunner.train_steps` (the train
    function's calls: "step"), `WeightAverager.average`, `launch` and `land` ("average"),
    `StandardRunner.train_loop_end` and the batch logs' conversion to floats ("read") and
    the controller's `CallbackList` hooks ("callbacks"), and records each call's start
    and end from the measured epoch's `on_epoch_begin` hook to its `on_epoch_end` hook.
    At `on_train_end` it writes them to `out_dir/split-<task>-<index>.json` (every task
    its own file, under the benchmark's own folder, never the run folder: in a cluster
    only the chief writes there).

    Args:
        out_dir: the folder of the files.
        epoch: the measured epoch (0-based). Defaults to `1` (the second).
    """

    def __init__(self, *, out_dir: str, epoch: int = 1):
        super().__init__()
        from kdist.engine.standard_runner import StandardRunner
        from kdist.engine.sync.averaging import WeightAverager

        self.out_dir = Path(out_dir)
        _SPLIT.epoch = int(epoch)
        _timed(StandardRunner, "train_steps", "step")
        _timed(StandardRunner, "train_loop_end", "read")
        _timed(WeightAverager, "average", "average")
        _timed(WeightAverager, "launch", "average")  # overlapped: the copy, the thread's start
        _timed(WeightAverager, "land", "average")  # ... and the wait for it, the apply
        _time_callback_list()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        name = _task_name()
        record = {
            "task": name,
            "window": _SPLIT.window,
            "events": _SPLIT.events,
            "cpu": _SPLIT.cpu,
        }
        (self.out_dir / f"split-{name}.json").write_text(json.dumps(record))
