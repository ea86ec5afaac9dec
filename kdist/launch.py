"""`python -m kdist.launch`: a local cluster on loopback, for development, tests and notebooks.

It does on one machine what Kubernetes or SLURM do on many: start one process per task
with its TF_CONFIG, give them one shared run directory, prefix each line of their output
with the task's name, and stop every process when one fails (restarting them all, up to
`--max-restarts` times). Parameter-server training tolerates a lost worker: its death is
reported and the chief goes on with the others.

Elastic restarts (`--min-workers M`, as torchrun's `--nnodes M:N`): a multi-worker run
whose worker fails in two starts in a row (gone for good) restarts with one worker fewer,
never fewer than M, from the last backup; kdist maps the step by examples consumed and
skips them in the global data stream, so no example is lost or repeated. With
`--grow-after SECONDS` a shrunk run is asked to save (SIGTERM, exit 42) after that long
and restarts at full size. The rules are in `kdist.elastic`; the per-task rules that end
a start in `kdist.supervisor`.

On a machine with GPUs each worker gets its own through `CUDA_VISIBLE_DEVICES` (dealt
round-robin, or `--gpus-per-worker N` each); parameter servers and the parameter-server
chief get none unless asked (`--ps-gpus N`); every task grows its GPU memory as needed
(`TF_FORCE_GPU_ALLOW_GROWTH=true`). See `kdist.gpus`.

Example:

```bash
python -m kdist.launch --workers 2 -- strategy=multi_worker_mirrored model=cnn
python -m kdist.launch --workers 2 --ps 1 -- strategy=parameter_server
python -m kdist.launch --workers 2 --gpus-per-worker 2 -- strategy=multi_worker_mirrored
python -m kdist.launch --workers 3 --min-workers 2 --max-restarts 3 -- strategy=multi_worker_mirrored
```

```python
from kdist.launch import run
exit_code = run(workers=2, overrides=["strategy=multi_worker_mirrored"])
```
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from kdist.chief import remove_scratch
from kdist.cluster import tf_config_for
from kdist.config.errors import ConfigError, exit_with
from kdist.elastic import ElasticPolicy
from kdist.exit_codes import EXIT_RESTART
from kdist.gpus import ALLOW_GROWTH, detect_gpus, plan_gpus
from kdist.sandbox import Guardian
from kdist.supervisor import Outcome, Task, Watch, exit_status, port_race, start, stop

__all__ = [
    "check_elastic_batch",
    "check_strategy",
    "clean_temp_leftovers",
    "free_ports",
    "main",
    "run",
]

_PORT_RETRIES = 3
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


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _default_run_dir() -> Path:
    now = datetime.now()
    return Path("outputs") / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S")


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


def _job_config(overrides: Sequence[str]) -> Any:
    """The composed config of the tasks' command line, or `None` to leave checks to them.

    `None` for a sweep (`-m`: each job may differ; its tasks report their own errors) and
    for a command line that does not compose (the tasks report it as one line).
    """
    from hydra._internal.utils import get_args_parser

    from kdist.config import compose

    args, _ = get_args_parser().parse_known_args(list(overrides))
    if args.multirun:
        return None
    try:
        return compose(
            args.overrides, config_name=args.config_name or "train", config_dir=args.config_dir
        )
    except Exception:  # the tasks report a bad command line themselves, as one line
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
    cfg = _job_config(overrides)
    if cfg is None:
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


def check_elastic_batch(
    overrides: Sequence[str], *, worker_counts: Sequence[int], replicas_per_worker: int = 1
) -> None:
    """Refuse a global batch that one of the cluster sizes an elastic run may use cannot split.

    A run restarted with fewer workers keeps its global batch (so the step and the data
    position map one to one): the batch must split evenly over every replica count.

    Args:
        overrides: the command line of `kdist.train`.
        worker_counts: the worker counts the run may use (`--min-workers` to `--workers`).
        replicas_per_worker: replicas each worker holds (its GPUs, or 1). Defaults to `1`.

    Raises:
        ConfigError: naming `trainer.global_batch_size` and the replica counts.
    """
    cfg = _job_config(overrides)
    if cfg is None or "trainer" not in cfg:
        return
    batch = cfg.trainer.get("global_batch_size")
    if not isinstance(batch, int):
        return  # a per-replica batch splits over any count
    replicas = [count * replicas_per_worker for count in worker_counts]
    uneven = [count for count in replicas if batch % count]
    if not uneven:
        return
    shown = ", ".join(str(count) for count in replicas)
    lcm = math.lcm(*replicas)
    raise ConfigError(
        "trainer.global_batch_size",
        f"does not split evenly over {uneven[0]} replicas; an elastic run may use {shown}",
        value=batch,
        hint=f"use a multiple of {lcm}, e.g. {max(lcm, batch - batch % lcm)}, "
        "or a narrower --min-workers",
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
) -> list[Task]:
    """The tasks of one start: command and environment (TF_CONFIG, GPUs) of each.

    `devices` maps `(task type, index)` to that task's `CUDA_VISIBLE_DEVICES`
    (`kdist.gpus.plan_gpus`); tasks not in it keep `base_env`'s. With `evaluator`, a
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
            tasks.append(Task("worker", i, [*python, module, *job_args], env, trains=True))
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
        tasks.append(Task("worker", i, [*python, "kdist.server"], env, trains=False))
    env = env_of("chief", 0, tf_config_for(cluster, "chief", 0))
    tasks.append(Task("chief", 0, [*python, module, *job_args], env, trains=True))
    return tasks


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
    min_workers: int | None = None,
    grow_after: float | None = None,
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
        min_workers: fewest workers to go on with. A multi-worker run restarts with one
            worker fewer when a worker slot is gone for good (it failed in two starts in
            a row; see `kdist.elastic`), resuming from the last backup; a
            parameter-server run goes on while this many workers are alive. Defaults
            to `None`: `workers` for multi-worker runs (a failed worker is restarted in
            place), 1 for parameter-server runs.
        grow_after: seconds a shrunk multi-worker run trains before the launcher asks
            it to save (SIGTERM, exit 42) and restarts it with every worker. Defaults
            to `None`: it stays shrunk.

    Returns:
        0 when every training task exited 0; otherwise the failing task's status
        (128 + N for a task killed by signal N), 124 on timeout, or 2 when the ports
        stay taken.

    Raises:
        ValueError: for a non-positive `workers`, negative `ps` or `max_restarts`.
        ConfigError: for a strategy that would train independent copies (`one_device`,
            `mirrored`, `auto` on several processes), a `host` that cannot be bound,
            GPUs asked that are not there (naming `--gpus`, `--gpus-per-worker` or
            `--ps-gpus`), `--min-workers` outside 1..`workers`, `--grow-after` that is
            not positive or given with `--ps` or without `--min-workers`, or a global
            batch that a cluster size of an elastic run cannot split.
    """
    if workers < 1:
        raise ValueError(f"`workers` ({workers}) must be a positive integer.")
    if ps < 0 or max_restarts < 0:
        raise ValueError(f"`ps` ({ps}) and `max_restarts` ({max_restarts}) must be >= 0.")
    policy = _elastic_policy(workers, ps, min_workers, max_restarts, grow_after)
    gpu_ids = detect_gpus(os.environ, gpus=gpus)

    def devices_for(count: int) -> dict[tuple[str, int], str]:
        return plan_gpus(
            gpu_ids=gpu_ids,
            workers=count,
            ps=ps,
            gpus_per_worker=gpus_per_worker,
            ps_gpus=ps_gpus,
            evaluator=evaluator,
        )

    devices_for(workers)  # GPUs asked that are not there: one line, before any check
    if module == "kdist.train":
        check_strategy(overrides, workers=workers, ps=ps)
        if policy.elastic and ps == 0:
            check_elastic_batch(
                overrides,
                worker_counts=range(workers, policy.min_workers - 1, -1),
                replicas_per_worker=gpus_per_worker or 1,
            )
    output = output or sys.stdout
    lock = threading.Lock()

    def say(message: str) -> None:
        with lock:
            output.write(f"[launch] {message}\n")
            output.flush()

    # The tasks use the overrides' folder when there is one: report and clean that one.
    launch = _Launch(
        module=module,
        overrides=list(overrides),
        host=host,
        ps=ps,
        run_dir=_given_run_dir(overrides) or (Path(run_dir) if run_dir else _default_run_dir()),
        # Memory growth in every task, kdist.server's included: tasks sharing a GPU must
        # not each reserve all of it.
        base_env=_base_env(),
        evaluator=evaluator,
        devices_for=devices_for,
        output=output,
        lock=lock,
        say=say,
        grace_seconds=grace_seconds,
        restart_grace_seconds=restart_grace_seconds,
        timeout=timeout,
        ps_min_workers=min_workers if ps and min_workers else 1,
    )
    free_ports(1, host)  # a `host` this machine cannot listen on: one line, before any task
    guardian = _guardian(host, isolate, say)
    try:
        return _supervise(launch, policy, guardian)
    finally:
        guardian.close()


def _base_env() -> dict[str, str]:
    env = {ALLOW_GROWTH: "true", **os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TF_CONFIG", None)
    return env


def _elastic_policy(
    workers: int,
    ps: int,
    min_workers: int | None,
    max_restarts: int,
    grow_after: float | None,
) -> ElasticPolicy:
    """The restart policy of a launch; bad `--min-workers`/`--grow-after` is a ConfigError."""
    if min_workers is not None and not 1 <= min_workers <= workers:
        raise ConfigError(
            "--min-workers",
            f"must be between 1 and --workers ({workers})",
            value=min_workers,
            hint=f"give a number from 1 to {workers}",
        )
    if grow_after is not None:
        problem = None
        if grow_after <= 0:
            problem = "must be a positive number of seconds"
        elif ps:
            problem = "applies to multi-worker runs: parameter-server runs do not shrink"
        elif min_workers is None or min_workers == workers:
            problem = "needs --min-workers below --workers (a cluster that can shrink)"
        if problem:
            raise ConfigError("--grow-after", problem, value=grow_after)
    return ElasticPolicy(
        workers=workers,
        # Parameter-server runs never shrink: their workers are tolerated as they go.
        min_workers=None if ps else min_workers,
        max_restarts=max_restarts,
        grow_after=grow_after,
    )


@dataclass
class _Launch:
    """What every start of one launch shares."""

    module: str
    overrides: list[str]
    host: str
    ps: int
    run_dir: Path
    base_env: dict[str, str]
    evaluator: bool
    devices_for: Callable[[int], dict[tuple[str, int], str]]
    output: IO[str]
    lock: threading.Lock
    say: Callable[[str], None]
    grace_seconds: float
    restart_grace_seconds: float
    timeout: float | None
    ps_min_workers: int = 1

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout if self.timeout else None


def _supervise(launch: _Launch, policy: ElasticPolicy, guardian: Guardian) -> int:
    """Start the cluster, watch it, and restart it as `policy` decides; the exit status."""
    say = launch.say
    for leftover in clean_temp_leftovers(launch.run_dir):
        say(f"removed {leftover}, left by an interrupted save")
    port_retries = 0
    shown_devices: dict[tuple[str, int], str] = {}
    while True:
        devices = launch.devices_for(policy.workers)
        if devices and devices != shown_devices:
            shown = ", ".join(f"{role} {i}: [{ids}]" for (role, i), ids in sorted(devices.items()))
            say(f"GPUs (CUDA_VISIBLE_DEVICES) per task: {shown}")
            shown_devices = devices
        outcome = _start_and_watch(launch, policy, guardian, devices)
        if outcome.timed_out:
            return outcome.status
        if outcome.status == 0:
            say("every task finished")
            return 0
        failed = outcome.failed
        assert failed is not None
        say(f"{failed.name} exited with status {exit_status(outcome.status)}; stopped every task")
        if port_race(failed):
            if port_retries < _PORT_RETRIES:
                port_retries += 1
                say("a port was taken between choosing and binding it; retrying with new ports")
                continue
            say(f"error: a port of {failed.name} stayed in use after {_PORT_RETRIES} retries")
            return 2
        if outcome.grow:
            say(policy.grow().message)
            continue
        blamed = failed.index if failed.role == "worker" and failed.trains else None
        if outcome.status == EXIT_RESTART:
            blamed = None  # asked to be restarted: nothing failed
        decision = policy.after_failure(worker=blamed)
        if decision.message:
            say(decision.message)
        if not decision.restart:
            return exit_status(outcome.status)
        say(f"restart {policy.restarts} of {policy.max_restarts}")


def _start_and_watch(
    launch: _Launch,
    policy: ElasticPolicy,
    guardian: Guardian,
    devices: dict[tuple[str, int], str],
) -> Outcome:
    """One start of the cluster with `policy.workers` workers, until a rule ends it."""
    tasks = _plan(
        workers=policy.workers,
        ps=launch.ps,
        module=launch.module,
        overrides=launch.overrides,
        host=launch.host,
        run_dir=launch.run_dir,
        base_env=launch.base_env,
        devices=devices,
        evaluator=launch.evaluator,
    )
    launch.say(f"starting {', '.join(t.name for t in tasks)}; run directory {launch.run_dir}")
    try:
        start(tasks, launch.output, launch.lock, guardian, launch.run_dir)
        outcome = Watch(
            tasks=tasks,
            say=launch.say,
            min_workers=launch.ps_min_workers,
            deadline=launch.deadline,
            restart_grace_seconds=launch.restart_grace_seconds,
            grow_due=policy.grow_due,
        ).run()
        if outcome.timed_out:
            launch.say(f"timeout after {launch.timeout:g} s; stopping every task")
        return outcome
    finally:
        stop(tasks, launch.grace_seconds)
        # A task killed before it could remove its scratch folders leaves them.
        for task in tasks:
            remove_scratch(launch.run_dir, task.role, task.index)
        guardian.clear()


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


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m kdist.launch`."""
    parser = argparse.ArgumentParser(
        prog="python -m kdist.launch",
        description="Run a kdist job as a local cluster on loopback ports.",
        epilog="Everything after `--` is passed to the training module, e.g. "
        "`-- strategy=multi_worker_mirrored model=cnn`. Elastic example: `--workers 3 "
        "--min-workers 2 --max-restarts 3 --grow-after 600 -- strategy=multi_worker_mirrored` "
        "restarts with 2 workers when one is gone for good, resuming from the last backup "
        "with no example lost or repeated, and tries 3 again after 600 s.",
    )
    parser.add_argument("--workers", type=int, required=True, help="worker processes")
    parser.add_argument("--ps", type=int, default=0, help="parameter-server processes")
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="restarts after a failure (shrinking ones included; growing back is not counted)",
    )
    parser.add_argument(
        "--min-workers",
        type=int,
        default=None,
        help="elastic: go on with at least this many workers. A multi-worker run restarts "
        "with one worker fewer, from the last backup, when a worker is gone for good (it "
        "failed in two starts in a row); a parameter-server run goes on while this many "
        "workers are alive (default: --workers, i.e. not elastic; 1 with --ps)",
    )
    parser.add_argument(
        "--grow-after",
        type=float,
        default=None,
        help="elastic: after SECONDS running shrunk, ask the workers to save (SIGTERM, exit "
        "42) and restart with all --workers (not counted as a restart; a worker that fails "
        "again at once is dropped again). Default: stay shrunk",
    )
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
    if args.min_workers is not None and not 1 <= args.min_workers <= args.workers:
        parser.error(
            f"--min-workers ({args.min_workers}) must be between 1 and --workers ({args.workers})"
        )
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
            min_workers=args.min_workers,
            grow_after=args.grow_after,
        )
    except ConfigError as error:
        exit_with(error)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
