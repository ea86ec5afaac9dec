"""Pre-flight checks of `kdist.launch`: a command line that cannot work stops before any task."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kdist.config.errors import ConfigError
from kdist.launcher.elastic import ElasticPolicy

__all__ = [
    "MEMORY_PER_TASK",
    "TASKS_PER_CORE",
    "check_cluster_size",
    "check_elastic_batch",
    "check_strategy",
    "elastic_policy",
    "machine_bound",
]

# What one local task costs: a TensorFlow process with kdist loaded holds about 0.4 GiB
# before it trains (measured on CPU); more tasks than cores x 4 only wait on each other.
MEMORY_PER_TASK = 2**29  # 0.5 GiB
TASKS_PER_CORE = 4
# Where a container's memory limit is (cgroup v2, then v1).
_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)

# The strategies that train one model over several processes, by launcher shape.
_CLUSTER_STRATEGIES = {False: "multi_worker_mirrored", True: "parameter_server"}


def _job_config(overrides: Sequence[str]) -> Any:
    """The composed config of the tasks' command line, or `None` to leave checks to them.

    `None` for a sweep (`-m`: each job may differ; its tasks report their own errors) and
    for a command line that does not compose (the tasks report it as one line).
    """
    from kdist.compat.tools_private import hydra_args_parser
    from kdist.config.compose import compose

    args, _ = hydra_args_parser().parse_known_args(list(overrides))
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


def elastic_policy(
    *,
    workers: int,
    ps: int,
    min_workers: int | None,
    max_restarts: int,
    grow_after: float | None,
) -> ElasticPolicy:
    """The restart policy of a launch, from its options.

    Args:
        workers: `--workers`.
        ps: `--ps`.
        min_workers: `--min-workers`, or `None`.
        max_restarts: `--max-restarts`.
        grow_after: `--grow-after`, or `None`.

    Returns:
        The `ElasticPolicy`; parameter-server runs never shrink (their lost workers are
        tolerated as they go), so theirs has `min_workers = workers`.

    Raises:
        ConfigError: naming `--min-workers` outside 1..`workers`, or `--grow-after` that
            is not positive, given with `--ps`, or given without a cluster that can shrink.
    """
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


def _memory_bytes() -> int:
    """This machine's memory, or its container's limit when that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def machine_bound(*, cores: int | None = None, memory: int | None = None) -> tuple[int, str]:
    """How many local tasks this machine can hold, and why: `(count, reason)`.

    The lower of `TASKS_PER_CORE` per core (the cores this process may use) and one task
    per `MEMORY_PER_TASK` of memory (the container's limit when it has one).
    """
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    memory = memory if memory is not None else _memory_bytes()
    by_cores = cores * TASKS_PER_CORE
    by_memory = max(1, memory // MEMORY_PER_TASK)
    if by_memory < by_cores:
        return by_memory, f"{memory / 2**30:.1f} GiB of memory at 0.5 GiB a TensorFlow task"
    return by_cores, f"{cores} cores at {TASKS_PER_CORE} TensorFlow tasks a core"


def check_cluster_size(
    overrides: Sequence[str] | None,
    *,
    workers: int,
    ps: int,
    evaluator: bool = False,
    replicas_per_worker: int = 1,
    cores: int | None = None,
    memory: int | None = None,
) -> None:
    """Refuse a local cluster this machine cannot hold, or whose batch cannot split.

    Checked before any task starts: the tasks (`workers`, `ps`, the chief of a
    parameter-server cluster, the sidecar evaluator) against `machine_bound`, then the
    global batch of a multi-worker run against its replicas (`workers` x
    `replicas_per_worker`).

    Args:
        overrides: the command line of `kdist.train`; `None` (another module) skips the
            batch check.
        workers: `--workers`.
        ps: `--ps`.
        evaluator: `--evaluator`. Defaults to `False`.
        replicas_per_worker: replicas each worker holds (its GPUs, or 1). Defaults to `1`.
        cores: the cores to count. Defaults to `None`: this process's.
        memory: the bytes of memory to count. Defaults to `None`: this machine's.

    Raises:
        ConfigError: naming `--workers` and the bound, or `trainer.global_batch_size`.
    """
    tasks = workers + ps + (1 if ps else 0) + (1 if evaluator else 0)
    bound, why = machine_bound(cores=cores, memory=memory)
    if tasks > bound:
        extra = tasks - workers
        raise ConfigError(
            "--workers",
            f"starts {tasks} local tasks; this machine holds at most {bound} ({why})",
            value=workers,
            hint=f"use --workers {max(1, bound - extra)} or fewer, or run the cluster on "
            "several machines (recipes/cluster/)",
        )
    if ps or overrides is None:
        return  # parameter servers: each worker draws its own batches
    cfg = _job_config(overrides)
    if cfg is None or "trainer" not in cfg:
        return
    batch = cfg.trainer.get("global_batch_size")
    replicas = workers * replicas_per_worker
    if isinstance(batch, int) and not isinstance(batch, bool) and batch % replicas:
        raise ConfigError(
            "--workers",
            f"gives {replicas} replicas, which trainer.global_batch_size={batch} cannot "
            "split evenly",
            value=workers,
            hint=f"use a --workers that divides {batch}, or a global batch that is a "
            f"multiple of {replicas}",
        )
