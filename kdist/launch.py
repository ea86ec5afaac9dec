"""`python -m kdist.launch`: a local cluster on loopback, for development, tests and notebooks.

It does on one machine what Kubernetes or SLURM do on many: start one process per task
with its TF_CONFIG, give them one shared run directory, prefix each line of their output
with the task's name, and stop every process when one fails (restarting them all, up to
`--max-restarts` times). Parameter-server training tolerates a lost worker: its death is
reported and the chief goes on with the others.

On a machine with GPUs each worker gets its own through `CUDA_VISIBLE_DEVICES` (dealt
round-robin, or `--gpus-per-worker N` each); parameter servers and the parameter-server
chief get none unless asked (`--ps-gpus N`); every task grows its GPU memory as needed
(`TF_FORCE_GPU_ALLOW_GROWTH=true`). See `kdist.gpus`.

Example:

```bash
python -m kdist.launch --workers 2 -- strategy=multi_worker_mirrored model=cnn
python -m kdist.launch --workers 2 --ps 1 -- strategy=parameter_server
python -m kdist.launch --workers 2 --gpus-per-worker 2 -- strategy=multi_worker_mirrored
```

```python
from kdist.launch import run
exit_code = run(workers=2, overrides=["strategy=multi_worker_mirrored"])
```
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import shutil
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

from kdist.cluster import remove_scratch, scratch_prefix, tf_config_for
from kdist.config.errors import ConfigError, exit_with
from kdist.gpus import ALLOW_GROWTH, detect_gpus, plan_gpus
from kdist.run_dir import default_run_dir
from kdist.sandbox import Guardian

__all__ = [
    "RESTART_EXIT_CODE",
    "check_strategy",
    "clean_temp_leftovers",
    "free_ports",
    "main",
    "run",
]

# A worker that exits with this code asks to be restarted (e.g. after a preemption save).
RESTART_EXIT_CODE = 42
_PORT_RACE_MARKERS = ("Address already in use", "Failed to add port", "address in use")
# How long a sidecar evaluator may take after training ends (its last checkpoints).
_EVALUATOR_GRACE_SECONDS = 600.0
_PORT_RETRIES = 3
# After a parameter server dies, the chief gets this long to notice and stop with its own
# error (naming the ps) before the launcher stops it.
_PS_LOSS_GRACE_SECONDS = 60.0
# The strategies that train one model over several processes, by launcher shape.
_CLUSTER_STRATEGIES = {False: "multi_worker_mirrored", True: "parameter_server"}
_WARNING = "WARNING: "


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


@dataclass
class _Task:
    role: str
    index: int
    command: list[str]
    env: dict[str, str]
    trains: bool
    process: subprocess.Popen | None = None
    tail: deque = field(default_factory=lambda: deque(maxlen=40))
    reader: threading.Thread | None = None

    @property
    def name(self) -> str:
        return f"{self.role} {self.index}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _default_run_dir() -> Path:
    return default_run_dir()


def _run_dir_key(overrides: Sequence[str]) -> str:
    multirun = any(arg in ("-m", "--multirun") for arg in overrides)
    return "hydra.sweep.dir" if multirun else "hydra.run.dir"


def _with_run_dir(overrides: Sequence[str], run_dir: Path) -> list[str]:
    given = list(overrides)
    key = _run_dir_key(given)
    if not any(arg.lstrip("+").startswith(f"{key}=") for arg in given):
        given.append(f"{key}={run_dir}")
    return given


def _given_run_dir(overrides: Sequence[str]) -> Path | None:
    """The run directory the overrides set (`hydra.run.dir=X`), which the tasks use."""
    key = _run_dir_key(overrides)
    for arg in reversed(list(overrides)):
        if arg.lstrip("+").startswith(f"{key}="):
            return Path(arg.split("=", 1)[1].strip("'\""))
    return None


def check_strategy(overrides: Sequence[str], *, workers: int, ps: int) -> None:
    """Refuse a strategy that would train independent copies on several processes.

    `one_device`, `mirrored` and `auto` each train their own model in every process: with
    several workers that is N runs writing one folder, not one distributed run.

    Args:
        overrides: the command line of `kdist.train` (Hydra overrides and options).
        workers: worker processes.
        ps: parameter-server processes.

    Raises:
        ConfigError: naming `strategy` and the valid choices.
    """
    if workers < 2 and ps == 0:
        return
    from hydra._internal.utils import get_args_parser

    from kdist.config import compose

    args, _ = get_args_parser().parse_known_args(list(overrides))
    if args.multirun:
        return  # sweeps may vary the strategy; each job's tasks report their own errors
    try:
        cfg = compose(
            args.overrides, config_name=args.config_name or "train", config_dir=args.config_dir
        )
    except Exception:  # the tasks report a bad command line themselves, as one line
        return
    target = str(cfg.strategy.get("_target_", ""))
    module, _, name = target.rpartition(".")
    if module != "kdist.strategies":
        return  # a user's own strategy factory
    wanted = _CLUSTER_STRATEGIES[ps > 0]
    if name == wanted:
        return
    shape = f"--workers {workers}" + (f" --ps {ps}" if ps else "")
    if name == _CLUSTER_STRATEGIES[False]:
        problem = f"{name} does not use the parameter servers of {shape}"
    elif name == _CLUSTER_STRATEGIES[True]:
        problem = f"{name} needs parameter servers, and {shape} starts none"
    else:
        problem = f"{name} trains an independent copy in each process of {shape}"
    raise ConfigError(
        "strategy",
        problem,
        value=name,
        hint=f"with {shape} use strategy={wanted} (multi-worker choices: "
        "multi_worker_mirrored, or parameter_server with --ps N)",
    )


def clean_temp_leftovers(run_dir: Path) -> list[Path]:
    """Remove `*_temp*` leftovers of interrupted saves in `run_dir`'s checkpoint folders.

    A save cut short (a full disk, a kill) leaves e.g. `backup/ckpt-20_temp`; training
    skips it on restore, but it takes disk space until the next save. Returns what was
    removed.
    """
    removed = []
    for folder in ("backup", "checkpoints"):
        for entry in sorted((run_dir / folder).glob("*_temp*")):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


def _plan(
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
) -> list[_Task]:
    """The tasks of one start: command and environment (TF_CONFIG, GPUs) of each.

    `devices` maps `(task type, index)` to that task's `CUDA_VISIBLE_DEVICES`
    (`kdist.gpus.plan_gpus`); tasks not in it keep `base_env`'s. With `evaluator`, a
    sidecar evaluator (`kdist.evaluate watch=true`, one process, no cluster) watches the
    run directory beside the training tasks.
    """
    devices = devices or {}
    tasks: list[_Task] = []
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
        tasks.append(_Task("evaluator", 0, command, env, trains=False))

    def env_of(role: str, index: int, tf_config: str) -> dict[str, str]:
        env = {**base_env, "TF_CONFIG": tf_config}
        if (role, index) in devices:
            env["CUDA_VISIBLE_DEVICES"] = devices[(role, index)]
        return env

    ports = free_ports(workers + ps + (1 if ps else 0), host)
    addresses = [f"{host}:{port}" for port in ports]
    python = [sys.executable, "-u", "-m"]
    job_args = _with_run_dir(overrides, run_dir)
    if ps == 0:
        cluster = {"worker": addresses}
        for i in range(workers):
            env = env_of("worker", i, tf_config_for(cluster, "worker", i))
            tasks.append(_Task("worker", i, [*python, module, *job_args], env, trains=True))
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
        tasks.append(_Task("ps", i, [*python, "kdist.server"], env, trains=False))
    for i in range(workers):
        env = env_of("worker", i, tf_config_for(cluster, "worker", i))
        tasks.append(_Task("worker", i, [*python, "kdist.server"], env, trains=False))
    env = env_of("chief", 0, tf_config_for(cluster, "chief", 0))
    tasks.append(_Task("chief", 0, [*python, module, *job_args], env, trains=True))
    return tasks


def _pump(task: _Task, output: IO[str], lock: threading.Lock) -> None:
    assert task.process is not None and task.process.stdout is not None
    for line in task.process.stdout:
        task.tail.append(line)
        with lock:
            output.write(f"[{task.name}] {line}")
            output.flush()


def _start(
    tasks: list[_Task], output: IO[str], lock: threading.Lock, guardian: Guardian, run_dir: Path
) -> None:
    for task in tasks:
        task.tail.clear()
        task.process = subprocess.Popen(
            task.command,
            env=task.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            # Its own process group, so stopping a task also stops anything it started.
            start_new_session=True,
            # Into the private network, and SIGKILL when the launcher dies.
            preexec_fn=guardian.preexec(),
        )
        guardian.watch(task.process.pid, [scratch_prefix(run_dir, task.role, task.index)])
        task.reader = threading.Thread(target=_pump, args=(task, output, lock), daemon=True)
        task.reader.start()
        with lock:
            output.write(f"[launch] {task.name} pid {task.process.pid}\n")
            output.flush()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _stop(tasks: list[_Task], grace_seconds: float) -> None:
    """SIGTERM every running task, then SIGKILL what is left after `grace_seconds`."""
    running = [t.process for t in tasks if t.process is not None and t.process.poll() is None]
    for process in running:
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for task in tasks:
        if task.process is not None:
            # The group may still hold children even when the leader has exited.
            _signal_group(task.process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                task.process.wait(timeout=10)
            if task.reader is not None:
                task.reader.join(timeout=5)
            if task.process.stdout is not None and (
                task.reader is None or not task.reader.is_alive()
            ):
                task.process.stdout.close()


def _wait_for_all(tasks: list[_Task], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for task in tasks:
        if task.process is not None and task.trains:
            with contextlib.suppress(subprocess.TimeoutExpired):
                task.process.wait(timeout=max(0.0, deadline - time.monotonic()))


def _port_race(task: _Task) -> bool:
    text = "".join(task.tail)
    return any(marker in text for marker in _PORT_RACE_MARKERS)


def _exit_status(code: int) -> int:
    """A process killed by signal N reports -N; shells report 128 + N."""
    return 128 - code if code < 0 else code


def run(
    workers: int,
    overrides: Sequence[str] = (),
    *,
    ps: int = 0,
    module: str = "kdist.train",
    max_restarts: int = 0,
    host: str = "127.0.0.1",
    run_dir: str | Path | None = None,
    timeout: float | None = None,
    grace_seconds: float = 5.0,
    restart_grace_seconds: float = 60.0,
    output: IO[str] | None = None,
    isolate: bool | None = None,
    gpus: int | None = None,
    gpus_per_worker: int | None = None,
    ps_gpus: int = 0,
    evaluator: bool = False,
) -> int:
    """Start a local cluster, wait for it, and return its exit status.

    Args:
        workers: worker processes (each trains under multi-worker strategies).
        overrides: Hydra overrides passed to every task running `module`. Defaults to `()`.
        ps: parameter-server processes; with `ps > 0` a chief runs `module` and the
            workers and parameter servers run `kdist.server`. Then a worker that exits
            is reported and the run goes on (the chief reruns its functions on the
            others) until no worker is left; a ps that exits gives the chief 60 s to
            stop with its own error before every task is stopped. Defaults to `0`.
        module: the Python module the training tasks run. Defaults to `"kdist.train"`.
        max_restarts: times to restart every task after one fails. Defaults to `0`.
        host: address the tasks advertise in TF_CONFIG. Defaults to `"127.0.0.1"`;
            another address must be given explicitly (TensorFlow's gRPC servers have no
            authentication) and turns the private network off, with a warning.
        run_dir: the shared run directory. Defaults to `None`: the overrides'
            `hydra.run.dir` (`hydra.sweep.dir` under `-m`) if given, else
            `outputs/<date>/<time>`.
        timeout: seconds before every task is stopped and 124 returned. Defaults to
            `None` (no limit).
        grace_seconds: time between SIGTERM and SIGKILL when stopping tasks.
            Defaults to `5.0`.
        restart_grace_seconds: after a task exits with the restart code 42 (it saved
            on SIGTERM), how long the others get to finish the same save and exit.
            Defaults to `60.0`.
        output: where the tasks' prefixed output goes. Defaults to `None`: `sys.stdout`.
        isolate: run the tasks in a private network namespace (only loopback, so their
            ports cannot be reached from outside this launch; nor can the tasks reach the
            network). `None` isolates when `host` is a loopback address and the kernel
            allows it, and warns otherwise; `False` turns it off with a warning.
            Defaults to `None`.
        gpus: GPUs on this machine. Defaults to `None`: the launcher's
            `CUDA_VISIBLE_DEVICES` if set, else `nvidia-smi -L`, else none.
        gpus_per_worker: consecutive GPUs each worker sees (`CUDA_VISIBLE_DEVICES`).
            Defaults to `None`: every GPU dealt round-robin over the workers.
        ps_gpus: GPUs each parameter server sees; the chief of a parameter-server
            cluster and parameter servers without them see none. Defaults to `0`.
        evaluator: start a sidecar evaluator beside the cluster (`kdist.sidecar`): it
            evaluates each checkpoint as it appears, on its own (no GPU), and the
            launch waits for it to finish after training ends; its failure is reported
            and does not stop training. Defaults to `False`.

    Returns:
        0 when every training task exited 0; otherwise the failing task's status
        (128 + N for a task killed by signal N), 124 on timeout, or 2 when the ports
        stay taken.

    Raises:
        ValueError: for a non-positive `workers`, negative `ps` or `max_restarts`.
        ConfigError: for a strategy that would train independent copies (`one_device`,
            `mirrored`, `auto` on several processes), a `host` that cannot be bound, or
            GPUs asked that are not there (naming `--gpus`, `--gpus-per-worker` or
            `--ps-gpus`).
    """
    if workers < 1:
        raise ValueError(f"`workers` ({workers}) must be a positive integer.")
    if ps < 0 or max_restarts < 0:
        raise ValueError(f"`ps` ({ps}) and `max_restarts` ({max_restarts}) must be >= 0.")
    output = output or sys.stdout
    lock = threading.Lock()
    devices = plan_gpus(
        gpu_ids=detect_gpus(os.environ, gpus=gpus),
        workers=workers,
        ps=ps,
        gpus_per_worker=gpus_per_worker,
        ps_gpus=ps_gpus,
        evaluator=evaluator,
    )
    if module == "kdist.train":
        check_strategy(overrides, workers=workers, ps=ps)
    # The tasks use the overrides' folder when there is one: report and clean that one.
    resolved_dir = _given_run_dir(overrides) or (Path(run_dir) if run_dir else _default_run_dir())
    # Memory growth in every task, kdist.server's included: tasks sharing a GPU must not
    # each reserve all of it.
    base_env = {ALLOW_GROWTH: "true", **os.environ, "PYTHONUNBUFFERED": "1"}
    base_env.pop("TF_CONFIG", None)

    def say(message: str) -> None:
        with lock:
            output.write(f"[launch] {message}\n")
            output.flush()

    free_ports(1, host)  # a `host` this machine cannot listen on: one line, before any task
    guardian = _guardian(host, isolate, say)
    try:
        return _supervise(
            workers=workers,
            ps=ps,
            module=module,
            overrides=overrides,
            host=host,
            run_dir=resolved_dir,
            base_env=base_env,
            max_restarts=max_restarts,
            timeout=timeout,
            grace_seconds=grace_seconds,
            restart_grace_seconds=restart_grace_seconds,
            output=output,
            lock=lock,
            say=say,
            guardian=guardian,
            devices=devices,
            evaluator=evaluator,
        )
    finally:
        guardian.close()


def _guardian(host: str, isolate: bool | None, say: Callable[[str], None]) -> Guardian:
    """The launch's guardian, in a private network when asked and possible; warns if not."""
    exposed = (
        "TensorFlow's gRPC servers have no authentication: anyone who can reach "
        "this machine's ports can run code in the tasks"
    )
    if not _is_loopback(host):
        if isolate:
            raise ConfigError(
                "--host",
                "a private network has only loopback: other machines cannot reach the tasks",
                value=host,
                hint="leave --host at 127.0.0.1 or drop the isolation request",
            )
        say(f"{_WARNING}tasks advertise {host} and listen on every interface; {exposed}")
        return Guardian(isolate=False)
    if isolate is False:
        say(f"{_WARNING}private network turned off: tasks listen on every interface; {exposed}")
        return Guardian(isolate=False)
    try:
        guardian = Guardian(isolate=True)
    except OSError as error:
        if isolate:
            raise
        say(
            f"{_WARNING}no private network for the tasks ({error.strerror or error}): "
            f"they listen on every interface; {exposed}"
        )
        return Guardian(isolate=False)
    say("tasks run in a private network namespace: their ports are reachable only inside it")
    return guardian


def _supervise(
    *,
    workers: int,
    ps: int,
    module: str,
    overrides: Sequence[str],
    host: str,
    run_dir: Path,
    base_env: dict[str, str],
    max_restarts: int,
    timeout: float | None,
    grace_seconds: float,
    restart_grace_seconds: float,
    output: IO[str],
    lock: threading.Lock,
    say: Callable[[str], None],
    guardian: Guardian,
    devices: dict[tuple[str, int], str],
    evaluator: bool = False,
) -> int:
    resolved_dir = run_dir
    if devices:
        shown = ", ".join(f"{role} {i}: [{ids}]" for (role, i), ids in sorted(devices.items()))
        say(f"GPUs (CUDA_VISIBLE_DEVICES) per task: {shown}")
    for leftover in clean_temp_leftovers(resolved_dir):
        say(f"removed {leftover}, left by an interrupted save")
    deadline = time.monotonic() + timeout if timeout else None
    restarts = port_retries = 0
    while True:
        tasks = _plan(
            workers=workers,
            ps=ps,
            module=module,
            overrides=overrides,
            host=host,
            run_dir=resolved_dir,
            base_env=base_env,
            devices=devices,
            evaluator=evaluator,
        )
        say(f"starting {', '.join(t.name for t in tasks)}; run directory {resolved_dir}")
        status = None
        failed: _Task | None = None
        # Parameter-server mode: servers that died and were reported, and the lost ps.
        lost: set[str] = set()
        lost_ps: _Task | None = None
        ps_deadline = 0.0
        try:
            _start(tasks, output, lock, guardian, resolved_dir)
            while status is None:
                time.sleep(0.1)
                for task in tasks:
                    assert task.process is not None
                    code = task.process.poll()
                    if code is None or task.name in lost:
                        continue
                    if task.role == "evaluator":
                        # The sidecar ends with the run; its failure costs no training.
                        lost.add(task.name)
                        if code != 0:
                            say(
                                f"{task.name} exited with status {_exit_status(code)}; "
                                "training goes on without it"
                            )
                        continue
                    if ps and task.role == "worker":
                        # The chief reruns the worker's functions on the other workers.
                        lost.add(task.name)
                        alive = [
                            t
                            for t in tasks
                            if t.role == "worker"
                            and t.process is not None
                            and t.process.poll() is None
                        ]
                        if alive:
                            say(
                                f"{task.name} exited with status {_exit_status(code)}; "
                                f"training goes on with {len(alive)} worker(s)"
                            )
                            continue
                        failed, status = task, code if code != 0 else 1
                        say("no worker is left")
                        break
                    if ps and task.role == "ps":
                        # The variables are gone: give the chief time to report it itself.
                        lost.add(task.name)
                        if lost_ps is None:
                            lost_ps = task
                            ps_deadline = time.monotonic() + _PS_LOSS_GRACE_SECONDS
                        say(
                            f"{task.name} exited with status {_exit_status(code)}; waiting up "
                            f"to {_PS_LOSS_GRACE_SECONDS:g} s for the chief to stop"
                        )
                        continue
                    if code != 0 or not task.trains:
                        failed, status = task, code if code != 0 else 1
                        if code == RESTART_EXIT_CODE:
                            # The others are saving at the same agreed step: let them
                            # finish and exit on their own before anything is stopped.
                            _wait_for_all(tasks, restart_grace_seconds)
                        break
                else:
                    if all(
                        t.process is not None and t.process.poll() == 0 for t in tasks if t.trains
                    ):
                        status = 0
                        _wait_for_evaluator(tasks, deadline, say)
                    elif lost_ps is not None and time.monotonic() > ps_deadline:
                        assert lost_ps.process is not None
                        code = lost_ps.process.returncode
                        failed, status = lost_ps, code if code else 1
                    elif deadline is not None and time.monotonic() > deadline:
                        say(f"timeout after {timeout:g} s; stopping every task")
                        _stop(tasks, grace_seconds)
                        return 124
        finally:
            _stop(tasks, grace_seconds)
            # A task killed before it could remove its scratch folders leaves them.
            for task in tasks:
                remove_scratch(resolved_dir, task.role, task.index)
            guardian.clear()
        if status == 0:
            say("every task finished")
            return 0
        assert failed is not None
        say(f"{failed.name} exited with status {_exit_status(status)}; stopped every task")
        if _port_race(failed):
            if port_retries < _PORT_RETRIES:
                port_retries += 1
                say("a port was taken between choosing and binding it; retrying with new ports")
                continue
            say(f"error: a port of {failed.name} stayed in use after {_PORT_RETRIES} retries")
            return 2
        if restarts < max_restarts:
            restarts += 1
            say(f"restart {restarts} of {max_restarts}")
            continue
        return _exit_status(status)


def _wait_for_evaluator(
    tasks: list[_Task], deadline: float | None, say: Callable[[str], None]
) -> None:
    """Training is done: let a sidecar evaluator finish its last checkpoints."""
    for task in tasks:
        if task.role != "evaluator" or task.process is None or task.process.poll() is not None:
            continue
        say(f"training finished; waiting for {task.name} to evaluate the last checkpoints")
        limit = _EVALUATOR_GRACE_SECONDS
        if deadline is not None:
            limit = max(0.0, min(limit, deadline - time.monotonic()))
        try:
            task.process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            say(f"{task.name} did not finish within {limit:g} s; stopping it")


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m kdist.launch`."""
    parser = argparse.ArgumentParser(
        prog="python -m kdist.launch",
        description="Run a kdist job as a local cluster on loopback ports.",
        epilog="Everything after `--` is passed to the training module, e.g. "
        "`-- strategy=multi_worker_mirrored model=cnn`.",
    )
    parser.add_argument("--workers", type=int, required=True, help="worker processes")
    parser.add_argument("--ps", type=int, default=0, help="parameter-server processes")
    parser.add_argument("--max-restarts", type=int, default=0, help="restarts after a failure")
    parser.add_argument("--module", default="kdist.train", help="module the trainers run")
    parser.add_argument("--host", default="127.0.0.1", help="address the tasks advertise")
    parser.add_argument("--run-dir", default=None, help="shared run directory")
    parser.add_argument("--timeout", type=float, default=None, help="seconds before giving up")
    parser.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="GPUs on this machine (default: CUDA_VISIBLE_DEVICES, else nvidia-smi -L, else 0)",
    )
    parser.add_argument(
        "--gpus-per-worker",
        type=int,
        default=None,
        help="GPUs each worker sees (default: all GPUs dealt round-robin over the workers)",
    )
    parser.add_argument(
        "--ps-gpus", type=int, default=0, help="GPUs each parameter server sees (default: 0)"
    )
    parser.add_argument(
        "--evaluator",
        action="store_true",
        help="a sidecar evaluator beside the cluster: evaluates each checkpoint as it "
        "appears (eval.csv, tensorboard/eval) without stopping training",
    )
    parser.add_argument(
        "--no-isolation",
        action="store_true",
        help="run the tasks in this machine's network (their ports open to every interface; "
        "needed when they must reach the network, e.g. to read gs:// data)",
    )
    args, rest = parser.parse_known_args(argv)
    if rest and rest[0] == "--":
        rest = rest[1:]
    unknown = [a for a in rest if a.startswith("--") and a not in ("--multirun",)]
    if unknown:
        parser.error(f"unknown option {unknown[0]}; put training overrides after `--`")
    if args.workers < 1:
        parser.error(f"--workers ({args.workers}) must be a positive integer")
    if args.ps < 0 or args.max_restarts < 0:
        parser.error("--ps and --max-restarts must be >= 0")
    # Stopping the launcher stops its tasks (they run in their own process groups).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        code = run(
            args.workers,
            rest,
            ps=args.ps,
            module=args.module,
            max_restarts=args.max_restarts,
            host=args.host,
            run_dir=args.run_dir,
            timeout=args.timeout,
            isolate=False if args.no_isolation else None,
            gpus=args.gpus,
            gpus_per_worker=args.gpus_per_worker,
            ps_gpus=args.ps_gpus,
            evaluator=args.evaluator,
        )
    except ConfigError as error:
        exit_with(error)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
