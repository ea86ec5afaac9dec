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
and restarts at full size. The rules are in `kdist.launcher.elastic`; the per-task rules that end
a start in `kdist.launcher.supervisor`.

On a machine with GPUs each worker gets its own through `CUDA_VISIBLE_DEVICES` (dealt
round-robin, or `--gpus-per-worker N` each); parameter servers and the parameter-server
chief get none unless asked (`--ps-gpus N`); every task grows its GPU memory as needed
(`TF_FORCE_GPU_ALLOW_GROWTH=true`). See `kdist.launcher.gpus`. Each worker gets its share of the
cores, `cores // workers` intra-op threads (`TF_NUM_INTRAOP_THREADS`, unless the
launcher's environment sets it; see `kdist.launcher.tasks.threads_per_worker`).

Example:

```bash
python -m kdist.launch --workers 2 -- strategy=multi_worker_mirrored model=cnn
python -m kdist.launch --workers 2 --ps 1 -- strategy=parameter_server
python -m kdist.launch --workers 2 --gpus-per-worker 2 -- strategy=multi_worker_mirrored
python -m kdist.launch --workers 3 --min-workers 2 --max-restarts 3 -- \
    strategy=multi_worker_mirrored
```

```python
from kdist.launch import run
exit_code = run(workers=2, overrides=["strategy=multi_worker_mirrored"])
```
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from kdist.command import program
from kdist.config.errors import ConfigError, exit_with
from kdist.launcher.checks import (
    check_cluster_size,
    check_elastic_batch,
    check_strategy,
    elastic_policy,
)
from kdist.launcher.gpus import ALLOW_GROWTH, detect_gpus, plan_gpus
from kdist.launcher.sandbox import Guardian
from kdist.launcher.supervisor import Launch, supervise
from kdist.launcher.tasks import free_ports, given_run_dir
from kdist.process.exit_codes import EXIT_INTERRUPTED
from kdist.runs.layout import default_run_dir

__all__ = ["main", "run"]
_WARNING = "WARNING: "


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
            others) until fewer than `min_workers` (default 1) are left; a ps that
            exits gives the chief 60 s to stop with its own error before every task is
            stopped. Defaults to `0`.
        module: the Python module the training tasks run. Defaults to `"kdist.train"`.
        max_restarts: times to restart every task after one fails (or exits 42), restarts
            with fewer workers included; growing back is not counted. Defaults to `0`.
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
        evaluator: start a sidecar evaluator beside the cluster (`kdist.evaluation.sidecar`): it
            evaluates each checkpoint as it appears, on its own (no GPU), and the
            launch waits for it to finish after training ends; its failure is reported
            and does not stop training. Defaults to `False`.
        min_workers: fewest workers to go on with. A multi-worker run restarts with one
            worker fewer when a worker slot is gone for good (it failed in two starts in
            a row; see `kdist.launcher.elastic`), resuming from the last backup; a
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
    policy = elastic_policy(
        workers=workers,
        ps=ps,
        min_workers=min_workers,
        max_restarts=max_restarts,
        grow_after=grow_after,
    )
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
    # An elastic run's batch is checked over every worker count it may use, just below.
    batch_checked_below = policy.elastic and ps == 0
    check_cluster_size(
        overrides if module == "kdist.train" and not batch_checked_below else None,
        workers=workers,
        ps=ps,
        evaluator=evaluator,
        replicas_per_worker=gpus_per_worker or 1,
    )
    if module == "kdist.train":
        check_strategy(overrides, workers=workers, ps=ps)
        if policy.elastic and ps == 0:
            check_elastic_batch(
                overrides,
                worker_counts=range(workers, policy.min_workers - 1, -1),
                replicas_per_worker=gpus_per_worker or 1,
            )
    # The tasks use the overrides' folder when there is one: report and clean that one.
    launch = Launch(
        module=module,
        overrides=list(overrides),
        host=host,
        ps=ps,
        run_dir=given_run_dir(overrides) or (Path(run_dir) if run_dir else default_run_dir()),
        # Memory growth in every task, kdist.server's included: tasks sharing a GPU must
        # not each reserve all of it.
        base_env=_base_env(),
        evaluator=evaluator,
        devices_for=devices_for,
        output=output or sys.stdout,
        grace_seconds=grace_seconds,
        restart_grace_seconds=restart_grace_seconds,
        timeout=timeout,
        ps_min_workers=min_workers if ps and min_workers else 1,
    )
    free_ports(1, host)  # a `host` this machine cannot listen on: one line, before any task
    guardian = _guardian(host, isolate, launch.say)
    try:
        return supervise(launch, policy, guardian)
    finally:
        guardian.close()


def _base_env() -> dict[str, str]:
    env = {ALLOW_GROWTH: "true", **os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TF_CONFIG", None)
    return env


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
        prog=program("kdist.launch"),
        description="Run a kdist job as a local cluster on loopback ports.",
        epilog="Everything after `--` is passed to the training module, e.g. "
        "`-- strategy=multi_worker_mirrored model=cnn`. Elastic example: `--workers 3 "
        "--min-workers 2 --max-restarts 3 --grow-after 600 -- strategy=multi_worker_mirrored` "
        "restarts with 2 workers when one is gone for good, resuming from the last backup "
        "with no example lost or repeated, and tries 3 again after 600 s.",
    )
    parser.add_argument("--workers", type=int, required=True, help="worker processes (required)")
    parser.add_argument("--ps", type=int, default=0, help="parameter-server processes (default: 0)")
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="restarts after a failure (shrinking ones included; growing back is not counted; "
        "default: 0)",
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
    parser.add_argument(
        "--module", default="kdist.train", help="module the trainers run (default: kdist.train)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address the tasks advertise (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--run-dir",
        default=None,
        help="shared run directory (default: the overrides' hydra.run.dir, else outputs/DATE/TIME)",
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds before giving up (default: no limit)"
    )
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
        "appears (eval.csv, tensorboard/eval) without stopping training (default: none)",
    )
    parser.add_argument(
        "--no-isolation",
        action="store_true",
        help="run the tasks in this machine's network (their ports open to every interface; "
        "needed when they must reach the network, e.g. to read gs:// data; default: a "
        "private network namespace where the kernel allows one)",
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
    # Every option but --no-isolation is the `run` keyword of the same name.
    options = vars(args)
    isolate = False if options.pop("no_isolation") else None
    # Stopping the launcher stops its tasks (they run in their own process groups).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        code = run(options.pop("workers"), rest, isolate=isolate, **options)
    except ConfigError as error:
        exit_with(error)
    except KeyboardInterrupt:
        # Ctrl-C: `supervise` has stopped every task (each saves on SIGTERM); one line.
        print(_INTERRUPTED, file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
    raise SystemExit(code)


_INTERRUPTED = (
    "kdist.launch: interrupted (Ctrl-C); every task was stopped (a training task saves "
    "its backup first): run the same command again to resume"
)


if __name__ == "__main__":
    main()
