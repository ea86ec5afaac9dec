"""The doctor's `devices` and `cluster` rows: what TensorFlow sees and where it runs."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from kdist.doctor.probes import ProbeResult
from kdist.doctor.table import Check

__all__ = ["ENV_VARS", "check_cluster", "check_launch_network", "device_rows"]

# Variables that change how TensorFlow or Keras behave; shown when set.
ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "KERAS_BACKEND",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_USE_LEGACY_KERAS",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_XLA_FLAGS",
    "XLA_FLAGS",
)


def device_rows(result: ProbeResult | None, timeout: float) -> tuple[list[Check], dict[str, Any]]:
    """The `devices` rows from the TensorFlow probe's result, and what it found.

    Args:
        result: the probe's result, or `None` when it did not run (`--no-probes`).
        timeout: the probe's time limit, for the message when it ran out.

    Returns:
        The rows, and the probe's payload (empty when TensorFlow did not start).
    """
    if result is None:
        return [Check("devices", "tensorflow", "skip", "not probed (--no-probes)")], {}
    info = result.payload
    if not (result.ok and info):
        problem = f"no answer after {timeout:g} s" if result.timed_out else result.last_error()
        return [Check("devices", "tensorflow", "FAIL", f"cannot start: {problem}")], {}
    cuda = (
        f"built with CUDA {info['cuda']}, cuDNN {info['cudnn']}"
        if info.get("built_with_cuda")
        else "built without CUDA"
    )
    rows = [
        Check(
            "devices",
            "tensorflow",
            "ok",
            f"imports in {result.seconds:.1f} s; Keras {info['keras']} on the "
            f"{info['backend']} backend; {cuda}",
        ),
        Check("devices", "CPU", "ok", f"{info['cpus']} physical; {os.cpu_count()} cores"),
    ]
    if info["gpus"]:
        rows.append(Check("devices", "GPU", "ok", "; ".join(info["gpu_names"])))
    else:
        rows.append(
            Check(
                "devices",
                "GPU",
                "info",
                "none: training runs on the CPU (split it for mirrored runs with "
                "runtime.logical_devices=N)",
            )
        )
    if info.get("other"):
        rows.append(Check("devices", "other", "info", ", ".join(info["other"])))
    return rows, info


def check_cluster(env: Mapping[str, str]) -> list[Check]:
    """Rows for the cluster environment: TF_CONFIG, SLURM, Kubernetes, and TF variables.

    Args:
        env: the environment to read (e.g. `os.environ`).
    """
    rows = []
    try:
        from kdist.cluster import resolve
    except ImportError:
        resolve = None  # type: ignore[assignment]
    text = env.get("TF_CONFIG", "").strip()
    info = None
    problem = None
    if resolve is not None:
        from kdist.config.errors import ConfigError

        try:
            info = resolve(env)
        except (ConfigError, ValueError) as error:
            problem = str(error)
    if problem and text:
        rows.append(Check("cluster", "TF_CONFIG", "FAIL", problem))
    elif text and info is not None and info.source == "tf_config":
        jobs = ", ".join(f"{job}: {len(addresses)}" for job, addresses in info.cluster.items())
        role = "the chief" if info.is_chief else "not the chief"
        rows.append(
            Check(
                "cluster",
                "TF_CONFIG",
                "ok",
                f"this process is {info.task_name} ({role}) of a cluster of {jobs}",
            )
        )
    elif text:
        rows.append(Check("cluster", "TF_CONFIG", "info", "set (kdist.cluster not available)"))
    else:
        rows.append(
            Check(
                "cluster",
                "TF_CONFIG",
                "ok",
                "not set: a single process (kdist.launch sets it for each local task)",
            )
        )

    slurm = {k: v for k, v in env.items() if k.startswith("SLURM_")}
    if not slurm:
        rows.append(Check("cluster", "SLURM", "ok", "not in a SLURM job"))
    elif problem and not text:
        rows.append(Check("cluster", "SLURM", "FAIL", problem))
    else:
        job = slurm.get("SLURM_JOB_ID", "?")
        tasks = slurm.get("SLURM_STEP_NUM_TASKS") or slurm.get("SLURM_NTASKS") or "1"
        where = slurm.get("SLURM_STEP_NODELIST") or slurm.get("SLURM_JOB_NODELIST") or "?"
        if info is not None and info.source == "slurm":
            detail = (
                f"job {job}: this process is task {slurm.get('SLURM_PROCID', '?')} of "
                f"{tasks} on {where}; kdist builds the cluster from SLURM"
            )
        else:
            detail = (
                f"job {job}, {tasks} task(s) on {where}: one process here (start one task "
                "per worker with srun to train on several)"
            )
        rows.append(Check("cluster", "SLURM", "ok", detail))

    if env.get("KUBERNETES_SERVICE_HOST"):
        detail = "in a Kubernetes pod" + (
            "" if text else "; without TF_CONFIG it trains alone (see recipes/cluster/)"
        )
        rows.append(Check("cluster", "Kubernetes", "info", detail))
    shown = [f"{name}={env[name]}" for name in ENV_VARS if env.get(name)]
    rows.append(
        Check(
            "cluster",
            "environment",
            "info",
            "; ".join(shown) if shown else f"none of {', '.join(ENV_VARS[:3])}, ... set",
        )
    )
    return rows


def check_launch_network(support: Callable[[], str | None] | None = None) -> Check:
    """The row saying whether `kdist.launch` can keep its tasks' ports local here.

    Args:
        support: returns why a private network namespace cannot be made, or `None`.
            Defaults to `None`: `kdist.launcher.sandbox.isolation_support`.
    """
    from kdist.launcher.sandbox import isolation_support

    probe = isolation_support if support is None else support
    try:
        reason = probe()
    except Exception as error:  # a failed probe means no isolation, never a crash here
        reason = f"{type(error).__name__}: {error}"
    if reason is None:
        return Check(
            "cluster",
            "kdist.launch network",
            "ok",
            "private network namespace: local tasks' ports are reachable only inside the launch",
        )
    return Check(
        "cluster",
        "kdist.launch network",
        "warn",
        f"no private network namespace ({reason}): local tasks listen on every interface "
        "with no authentication; use a firewall or a machine on a trusted network",
    )
