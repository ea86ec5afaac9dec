"""Which GPUs each task of `kdist.launch` sees, decided without importing TensorFlow.

On a machine with several GPUs every local worker gets its own through
`CUDA_VISIBLE_DEVICES`: dealt round-robin by default (with 2 workers on 4 GPUs, worker 0
gets `0,2` and worker 1 gets `1,3`), or `gpus_per_worker` consecutive ones each
(`0,1` and `2,3`). Parameter servers, the parameter-server chief (a coordinator) and an
evaluator get none (`CUDA_VISIBLE_DEVICES=""`) unless asked. On a machine without GPUs
nothing is set.

Example:

```python
from kdist.launcher.gpus import plan_gpus
plan_gpus(gpu_ids=["0", "1", "2", "3"], workers=2, gpus_per_worker=2)
# {("worker", 0): "0,1", ("worker", 1): "2,3"}
```
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping

from kdist.config.errors import ConfigError

__all__ = ["ALLOW_GROWTH", "detect_gpus", "plan_gpus"]

# TensorFlow's own switch for memory growth on every GPU; the launcher sets it for each
# task so that tasks sharing a GPU do not each take all of its memory at start-up.
ALLOW_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"
_VISIBLE = "CUDA_VISIBLE_DEVICES"


def _nvidia_smi_count() -> int | None:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        listing = subprocess.run(
            [tool, "-L"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listing.returncode != 0:
        return None
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


def detect_gpus(env: Mapping[str, str], *, gpus: int | None = None) -> list[str]:
    """The GPU ids the launcher may hand out, as `CUDA_VISIBLE_DEVICES` entries.

    The launcher's own `CUDA_VISIBLE_DEVICES` comes first (its entries are what the
    tasks may see); else `nvidia-smi -L`; else no GPU.

    Args:
        env: the launcher's environment.
        gpus: the GPU count the user states (`--gpus`), instead of asking `nvidia-smi`.
            Defaults to `None` (detect).

    Returns:
        The ids, e.g. `["0", "1", "2", "3"]`; empty without GPUs.

    Raises:
        ConfigError: naming `--gpus` when it is negative or more than the launcher's
            `CUDA_VISIBLE_DEVICES` lists.
    """
    if gpus is not None and gpus < 0:
        raise ConfigError("--gpus", "must be a number >= 0", value=gpus)
    visible = env.get(_VISIBLE)
    if visible is not None:
        listed = [entry.strip() for entry in visible.split(",") if entry.strip()]
        # CUDA stops at the first invalid entry; "-1" is the usual way to hide every GPU.
        if "-1" in listed:
            listed = listed[: listed.index("-1")]
        if gpus is None:
            return listed
        if gpus > len(listed):
            raise ConfigError(
                "--gpus",
                f"is more than the {len(listed)} GPU(s) the launcher's "
                f"CUDA_VISIBLE_DEVICES={visible!r} lists",
                value=gpus,
                hint=f"use --gpus {len(listed)} or fewer, or widen CUDA_VISIBLE_DEVICES",
            )
        return listed[:gpus]
    count = gpus if gpus is not None else _nvidia_smi_count() or 0
    return [str(i) for i in range(count)]


def _too_many(option: str, value: int, wanted: int, have: int, what: str) -> ConfigError:
    return ConfigError(
        option,
        f"asks for {wanted} GPU(s) ({what}) but {have} are available",
        value=value,
        hint="ask for fewer, or state the machine's count with --gpus N",
    )


def plan_gpus(
    *,
    gpu_ids: list[str],
    workers: int,
    ps: int = 0,
    gpus_per_worker: int | None = None,
    ps_gpus: int = 0,
    evaluator: bool = False,
) -> dict[tuple[str, int], str]:
    """The `CUDA_VISIBLE_DEVICES` of each task of a local cluster.

    Args:
        gpu_ids: the GPUs to hand out (`detect_gpus`).
        workers: worker tasks.
        ps: parameter-server tasks; with `ps > 0` there is also a chief (the
            coordinator), which gets no GPU. Defaults to `0`.
        gpus_per_worker: consecutive GPUs per worker. Defaults to `None`: deal every GPU
            round-robin (a worker then gets every `workers`-th GPU; with more workers
            than GPUs, workers share them).
        ps_gpus: GPUs for each parameter server, taken from the end of `gpu_ids`.
            Defaults to `0`.
        evaluator: plan an `("evaluator", 0)` task too, with no GPU. Defaults to `False`.

    Returns:
        `{(task type, index): CUDA_VISIBLE_DEVICES}`; empty when `gpu_ids` is empty and
        nothing asked for GPUs (the tasks' environment is then left alone).

    Raises:
        ConfigError: naming `--gpus-per-worker` or `--ps-gpus` when it is below its
            minimum or asks for more GPUs than `gpu_ids` holds.
    """
    if gpus_per_worker is not None and gpus_per_worker < 1:
        raise ConfigError(
            "--gpus-per-worker",
            "must be an integer >= 1",
            value=gpus_per_worker,
            hint="leave it out to deal the GPUs round-robin",
        )
    if ps_gpus < 0:
        raise ConfigError("--ps-gpus", "must be an integer >= 0", value=ps_gpus)
    if ps_gpus and not ps:
        raise ConfigError("--ps-gpus", "needs parameter servers (--ps N)", value=ps_gpus)
    have = len(gpu_ids)
    if not gpu_ids and gpus_per_worker is None and not ps_gpus:
        return {}
    reserved = ps * ps_gpus
    if reserved > have:
        raise _too_many("--ps-gpus", ps_gpus, reserved, have, f"{ps_gpus} x --ps {ps}")
    for_workers = gpu_ids[: have - reserved]
    plan: dict[tuple[str, int], str] = {}
    if gpus_per_worker is not None:
        wanted = workers * gpus_per_worker
        if wanted > len(for_workers):
            what = f"{gpus_per_worker} x --workers {workers}"
            free = len(for_workers)
            if reserved:
                what += f"; --ps-gpus takes {reserved} of {have}"
            raise _too_many("--gpus-per-worker", gpus_per_worker, wanted, free, what)
        for i in range(workers):
            chunk = for_workers[i * gpus_per_worker : (i + 1) * gpus_per_worker]
            plan[("worker", i)] = ",".join(chunk)
    elif not for_workers:
        for i in range(workers):
            plan[("worker", i)] = ""
    elif workers <= len(for_workers):
        for i in range(workers):
            plan[("worker", i)] = ",".join(for_workers[i::workers])
    else:
        for i in range(workers):
            plan[("worker", i)] = for_workers[i % len(for_workers)]
    for j in range(ps):
        start = have - reserved + j * ps_gpus
        plan[("ps", j)] = ",".join(gpu_ids[start : start + ps_gpus])
    if ps:
        plan[("chief", 0)] = ""
    if evaluator:
        plan[("evaluator", 0)] = ""
    return plan
