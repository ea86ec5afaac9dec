"""Running kdist commands in other processes and reading the probes' lines back."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.probes import parse

__all__ = ["Finished", "launch_cluster", "run_command"]


@dataclass
class Finished:
    """A finished command: exit status, output, wall seconds and when it started."""

    status: int
    output: str
    seconds: float
    started: float  # time.time() just before the process was started
    lines: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def check(self, what: str) -> None:
        if self.status != 0:
            tail = "\n".join(self.output.splitlines()[-25:])
            raise RuntimeError(f"{what} exited with status {self.status}:\n{tail}")


def _env() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


def run_command(
    args: Sequence[str],
    *,
    cwd: Path,
    timeout: float = 600,
    prefix: str = "",
    cpus: Sequence[int] | None = None,
    env: Mapping[str, str] | None = None,
) -> Finished:
    """Run `python args...` and collect the probes' lines from its output.

    `cpus`: the cores the process may use (it sizes TensorFlow's threads to them);
    defaults to this process's. `env`: variables set for it beside this process's.
    """
    started = time.time()
    clock = time.perf_counter()
    pinned = None if cpus is None else set(cpus)
    done = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=None if pinned is None else lambda: os.sched_setaffinity(0, pinned),
    )
    seconds = time.perf_counter() - clock
    return Finished(
        done.returncode, done.stdout, seconds, started, parse(done.stdout, prefix=prefix)
    )


class _Capture(io.StringIO):
    """A thread-safe text sink for `kdist.launch.run(output=...)`."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            return super().write(text)


def launch_cluster(
    *,
    workers: int,
    ps: int,
    overrides: Sequence[str],
    run_dir: Path,
    timeout: float = 900,
    prefix: str,
    module: str = "kdist.train",
) -> Finished:
    """`kdist.launch.run` in this process (its tasks are processes); probes of `prefix`.

    With `KDIST_BENCH_NO_ISOLATE=1` the tasks stay in this process's network namespace
    instead of the launcher's private one (`benchmarks.slow_link` limits the loopback of a
    namespace it made itself, which the launcher's own would leave out).
    """
    from kdist.launch import run

    isolate = False if os.environ.get("KDIST_BENCH_NO_ISOLATE") == "1" else None
    capture = _Capture()
    started = time.time()
    clock = time.perf_counter()
    status = run(
        workers,
        list(overrides),
        ps=ps,
        module=module,
        run_dir=run_dir,
        timeout=timeout,
        output=capture,
        isolate=isolate,
    )
    seconds = time.perf_counter() - clock
    text = capture.getvalue()
    return Finished(status, text, seconds, started, parse(text, prefix=prefix))
