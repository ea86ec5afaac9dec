"""The processes of a local cluster: what each task runs, starting and stopping them.

`plan_tasks` gives each task of one start its command and environment (TF_CONFIG on
loopback ports, GPUs, the worker's share of the cores); `start` runs them with their
output prefixed by their name; `stop` ends them (SIGTERM, then SIGKILL).
`kdist.launcher.supervisor` decides when.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kdist.cluster import scratch_prefix, tf_config_for
from kdist.config.constants import LOCAL_CLUSTER_ENV
from kdist.config.errors import ConfigError
from kdist.launcher.sandbox import Guardian, start_in_own_group
from kdist.process.runtime import INTRA_OP_THREADS

__all__ = [
    "INTRA_OP_THREADS",
    "PIN_CORES_ENV",
    "Task",
    "cores_of_workers",
    "exit_status",
    "free_ports",
    "given_run_dir",
    "plain",
    "plan_tasks",
    "port_race",
    "signal_group",
    "start",
    "stop",
    "threads_per_worker",
]

# `KDIST_PIN_CORES=0` in the launcher's environment keeps every task on all the cores.
PIN_CORES_ENV = "KDIST_PIN_CORES"

_PORT_RACE_MARKERS = ("Address already in use", "Failed to add port", "address in use")


@dataclass
class Task:
    """One process of the cluster: its role, command, environment and output tail."""

    role: str
    index: int
    command: list[str]
    env: dict[str, str]
    trains: bool
    cores: tuple[int, ...] | None = None  # the CPUs it runs on (None: all of them)
    process: subprocess.Popen | None = None
    tail: deque = field(default_factory=lambda: deque(maxlen=40))
    reader: threading.Thread | None = None
    # Lines kept out of the launch's output (`start`'s `quiet`); still in `tail`.
    hidden: int = 0

    @property
    def name(self) -> str:
        return f"{self.role} {self.index}"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports free on `host` right now.

    Another process may still take one before the task binds it
    (tensorflow/tensorflow#46602); `run` retries a launch that fails that way.
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    except OSError as error:
        raise ConfigError(
            "--host",
            f"cannot listen on this address ({error.strerror or error})",
            value=host,
            hint="give an address of this machine, e.g. 127.0.0.1",
        ) from None
    finally:
        for sock in sockets:
            sock.close()


def _run_dir_key(overrides: Sequence[str]) -> str:
    multirun = any(arg in ("-m", "--multirun") for arg in overrides)
    return "hydra.sweep.dir" if multirun else "hydra.run.dir"


def with_run_dir(overrides: Sequence[str], run_dir: Path) -> list[str]:
    given = list(overrides)
    key = _run_dir_key(given)
    if not any(arg.lstrip("+").startswith(f"{key}=") for arg in given):
        given.append(f"{key}={run_dir}")
    return given


def given_run_dir(overrides: Sequence[str]) -> Path | None:
    """The run directory the overrides set (`hydra.run.dir=X`), which the tasks use."""
    key = _run_dir_key(overrides)
    for arg in reversed(list(overrides)):
        if arg.lstrip("+").startswith(f"{key}="):
            return Path(arg.split("=", 1)[1].strip("'\""))
    return None


def _cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def _cores() -> int:
    return len(_cpus())


def cores_of_workers(workers: int, env: dict[str, str]) -> list[tuple[int, ...]] | None:
    """The CPUs each of `workers` local training workers is pinned to: disjoint shares.

    Worker i runs on the i-th `cores // workers` of the launcher's CPUs, so the workers do
    not take each other's cores and their thread pools (which TensorFlow sizes to the CPUs a
    process may use) match their share; a step's all-reduce then waits for no worker
    descheduled by another. The chief of a parameter-server cluster and the ps keep every
    core (they mostly wait on the network). `None` (no pinning) with fewer cores than
    workers, off Linux, or with `KDIST_PIN_CORES=0`.
    """
    if env.get(PIN_CORES_ENV, "1").strip() in ("0", "false", "no") or not hasattr(
        os, "sched_setaffinity"
    ):
        return None
    cpus = _cpus()
    share = len(cpus) // max(1, workers)
    if share < 1:
        return None
    return [tuple(cpus[i * share : (i + 1) * share]) for i in range(workers)]


def threads_per_worker(workers: int, env: dict[str, str]) -> int | None:
    """Intra-op threads for each of `workers` local workers: this machine's cores shared out.

    Every TensorFlow process otherwise sizes its thread pool to all the cores, so N
    workers on one machine run N times as many compute threads as there are cores (2
    MWMS workers of the MNIST CNN on 2 cores: 13 % more examples/s with 1 thread
    each). `None` when `env` already sets `TF_NUM_INTRAOP_THREADS` (the user's choice).
    """
    if env.get(INTRA_OP_THREADS, "").strip():
        return None
    return max(1, _cores() // max(1, workers))


def plan_tasks(
    *,
    workers: int,
    ps: int,
    module: str,
    overrides: Sequence[str],
    host: str,
    run_dir: Path,
    base_env: dict[str, str],
    devices: dict[tuple[str, int], str] | None = None,
    evaluator: bool = False,
) -> list[Task]:
    """The tasks of one start: command and environment (TF_CONFIG, GPUs, threads) of each.

    Workers get `threads_per_worker` intra-op threads (`TF_NUM_INTRAOP_THREADS`; a
    `runtime.intra_op_threads` override still wins in a `kdist.train` worker).
    `devices` maps `(task type, index)` to that task's `CUDA_VISIBLE_DEVICES`
    (`kdist.launcher.gpus.plan_gpus`); tasks not in it keep `base_env`'s. With `evaluator`, a
    sidecar evaluator (`kdist.evaluate watch=true`, one process, no cluster) watches the
    run directory beside the training tasks.
    """
    devices = devices or {}
    tasks: list[Task] = []
    if evaluator:
        env = {**base_env}
        env.pop("TF_CONFIG", None)
        if ("evaluator", 0) in devices:
            env["CUDA_VISIBLE_DEVICES"] = devices[("evaluator", 0)]
        # This launch writes the run folder it reads, so its config is trusted.
        command = [
            sys.executable,
            "-u",
            "-m",
            "kdist.evaluate",
            f"run_dir={run_dir}",
            "watch=true",
            "poll_seconds=2",
            "trust_run_dir=true",
        ]
        tasks.append(Task("evaluator", 0, command, env, trains=False))

    threads = threads_per_worker(workers, base_env)
    pinned = cores_of_workers(workers, base_env)

    def cores_of(role: str, index: int) -> tuple[int, ...] | None:
        return pinned[index] if pinned is not None and role == "worker" else None

    def env_of(role: str, index: int, tf_config: str) -> dict[str, str]:
        # The chief's `ClusterSpeed` line (kdist.callbacks.progress).
        env = {**base_env, "TF_CONFIG": tf_config, LOCAL_CLUSTER_ENV: f"{workers},{ps}"}
        if role == "worker" and threads is not None:
            env[INTRA_OP_THREADS] = str(threads)
        if (role, index) in devices:
            env["CUDA_VISIBLE_DEVICES"] = devices[(role, index)]
        return env

    ports = free_ports(workers + ps + (1 if ps else 0), host)
    addresses = [f"{host}:{port}" for port in ports]
    python = [sys.executable, "-u", "-m"]
    job_args = with_run_dir(overrides, run_dir)
    if ps == 0:
        cluster = {"worker": addresses}
        for i in range(workers):
            env = env_of("worker", i, tf_config_for(cluster, "worker", i))
            tasks.append(
                Task(
                    "worker",
                    i,
                    [*python, module, *job_args],
                    env,
                    trains=True,
                    cores=cores_of("worker", i),
                )
            )
        return tasks
    # Parameter-server training: the chief coordinates and runs `module`; workers and
    # parameter servers are plain TensorFlow servers (`kdist.server`).
    cluster = {
        "chief": addresses[:1],
        "worker": addresses[1 : 1 + workers],
        "ps": addresses[1 + workers :],
    }
    for i in range(ps):
        env = env_of("ps", i, tf_config_for(cluster, "ps", i))
        tasks.append(Task("ps", i, [*python, "kdist.server"], env, trains=False))
    for i in range(workers):
        env = env_of("worker", i, tf_config_for(cluster, "worker", i))
        tasks.append(
            Task(
                "worker",
                i,
                [*python, "kdist.server"],
                env,
                trains=False,
                cores=cores_of("worker", i),
            )
        )
    env = env_of("chief", 0, tf_config_for(cluster, "chief", 0))
    tasks.append(Task("chief", 0, [*python, module, *job_args], env, trains=True))
    return tasks


def _span(cores: tuple[int, ...]) -> str:
    """`0-7` for a run of CPUs, else the list."""
    if list(cores) == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}" if len(cores) > 1 else str(cores[0])
    return ",".join(map(str, cores))


def exit_status(code: int) -> int:
    """A process killed by signal N reports -N; shells report 128 + N."""
    return 128 - code if code < 0 else code


def port_race(task: Task) -> bool:
    """Whether `task` failed because a port was taken between choosing and binding it."""
    text = "".join(task.tail)
    return any(marker in text for marker in _PORT_RACE_MARKERS)


# Terminal codes a task may still print (a program's colours, a bar drawn for a
# terminal): ANSI escape sequences (CSI and OSC), backspaces and other control
# characters but the tab. A carriage return already ends a line here (text mode).
_TERMINAL_CODES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: window titles, links
    r"|\x1b[@-Z\\-_]"  # other two-character escapes
    r"|[\x00-\x08\x0b-\x1f\x7f]"
)


def plain(line: str) -> str:
    """`line` without terminal codes: what a log file or `[worker N]` line should hold."""
    return _TERMINAL_CODES.sub("", line)


def _pump(
    task: Task,
    output: IO[str],
    lock: threading.Lock,
    quiet: Callable[[Task, str], bool] | None = None,
) -> None:
    assert task.process is not None and task.process.stdout is not None
    # Text mode reads a carriage return as a line end: a redrawn bar arrives as lines.
    for raw in task.process.stdout:
        task.tail.append(raw)
        text = raw.rstrip("\n")
        line = plain(text)
        if text and not line.strip():
            continue  # nothing but codes: what is left of a redraw
        if quiet is not None and quiet(task, line):
            task.hidden += 1
            continue
        with lock:
            output.write(f"[{task.name}] {line}\n")
            output.flush()


def start(
    tasks: list[Task],
    output: IO[str],
    lock: threading.Lock,
    guardian: Guardian,
    run_dir: Path,
    quiet: Callable[[Task, str], bool] | None = None,
) -> None:
    """Start every task, its output prefixed with its name on `output`.

    Args:
        tasks: the tasks of one start.
        output: where their lines go.
        lock: held while a line is written.
        guardian: the sandbox that watches them.
        run_dir: the run folder (their scratch folders are named after it).
        quiet: whether a task's line is kept out of `output` (counted in its `hidden`).
            Defaults to `None`: every line is shown.
    """
    for task in tasks:
        task.tail.clear()
        task.hidden = 0
        # Its own process group, so stopping a task also stops anything it started.
        task.process = start_in_own_group(
            task.command,
            env=task.env,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Into the private network, SIGKILL when the launcher dies, its own cores.
            preexec_fn=_pinned(guardian.preexec(), task.cores),
        )
        guardian.watch(task.process.pid, [scratch_prefix(run_dir, task.role, task.index)])
        task.reader = threading.Thread(target=_pump, args=(task, output, lock, quiet), daemon=True)
        task.reader.start()
        on = "" if task.cores is None else f" on cpus {_span(task.cores)}"
        with lock:
            output.write(f"[launch] {task.name} pid {task.process.pid}{on}\n")
            output.flush()


def _pinned(preexec: Callable[[], None], cores: tuple[int, ...] | None) -> Callable[[], None]:
    if cores is None:
        return preexec

    def child() -> None:
        preexec()
        os.sched_setaffinity(0, cores)

    return child


def signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def stop(tasks: list[Task], grace_seconds: float) -> None:
    """SIGTERM every running task, then SIGKILL what is left after `grace_seconds`."""
    running = [t.process for t in tasks if t.process is not None and t.process.poll() is None]
    for process in running:
        signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for task in tasks:
        if task.process is not None:
            # The group may still hold children even when the leader has exited.
            signal_group(task.process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                task.process.wait(timeout=10)
            if task.reader is not None:
                task.reader.join(timeout=5)
            if task.process.stdout is not None and (
                task.reader is None or not task.reader.is_alive()
            ):
                task.process.stdout.close()
