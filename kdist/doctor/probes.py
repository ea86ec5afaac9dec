"""The doctor's probes: TensorFlow and short training runs, each in its own process.

Each probe runs with a time limit in its own process group, so a hang cannot stall the
doctor and a probe's own processes (`kdist.launch` starts one per task) are all killed.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdist.doctor.table import Check
from kdist.runs.layout import METRICS

__all__ = [
    "MULTI_PROCESS",
    "PROBE_OVERRIDES",
    "ProbeResult",
    "check_strategy",
    "probe_strategy",
    "probe_tensorflow",
    "run_probe",
    "strategy_options",
]

# A tiny job every probe trains: two steps of a small MLP on synthetic 8x8 images.
PROBE_OVERRIDES = (
    "model=mlp",
    "model.units=[16]",
    "data=synthetic",
    "data.source.num_train=256",
    "data.source.num_validation=64",
    "data.source.input_shape=[8,8,1]",
    "trainer.epochs=1",
    "trainer.steps_per_epoch=2",
    "trainer.global_batch_size=16",
    "trainer.steps_per_execution=1",
    "trainer.verbose=0",
    "callbacks=minimal",
)
# Strategies that need several processes: `kdist.launch` arguments for their probe.
MULTI_PROCESS: dict[str, dict[str, int]] = {
    "multi_worker_mirrored": {"workers": 2, "ps": 0},
    "parameter_server": {"workers": 2, "ps": 1},
}
_PROBE_MARK = "kdist-doctor-probe: "


@dataclass
class ProbeResult:
    """What a probe subprocess did: its exit code (None on timeout), output and time."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def last_error(self) -> str:
        """The most telling line of the output: the last that is not TensorFlow noise."""
        from kdist.process.quiet import stderr_noise

        noise = [*stderr_noise(), re.compile(r"failed call to cuInit")]
        for text in (self.stderr, self.stdout):
            lines = [
                line.strip()
                for line in text.splitlines()
                if line.strip() and not any(p.search(line) for p in noise)
            ]
            if lines:
                return lines[-1][:200]
        return "no output"


def _probe_env() -> dict[str, str]:
    """The doctor's environment without cluster variables: a probe is a local process
    and must not try to join the cluster the doctor itself may be running in."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("SLURM_")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_probe(
    command: Sequence[str],
    *,
    timeout: float,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> ProbeResult:
    """Run `command` in its own process group, killing the whole group after `timeout`.

    A probe may start processes of its own (`kdist.launch` starts one per task); killing
    the group leaves none of them behind.

    Args:
        command: the program and its arguments.
        timeout: seconds before the group is killed.
        cwd: working directory. Defaults to `None` (the doctor's).
        env: environment. Defaults to `None`: the doctor's without cluster variables.

    Returns:
        A `ProbeResult`; `payload` holds the JSON the probe printed after
        `kdist-doctor-probe: `, if any.
    """
    started = time.perf_counter()
    process = subprocess.Popen(
        list(command),
        cwd=cwd,
        env=dict(env) if env is not None else _probe_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
    finally:
        # The leader may have exited and left children (e.g. a failed launch).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    payload: dict[str, Any] = {}
    for line in stdout.splitlines():
        if line.startswith(_PROBE_MARK):
            with contextlib.suppress(json.JSONDecodeError):
                payload = json.loads(line[len(_PROBE_MARK) :])
    return ProbeResult(
        returncode=None if timed_out else process.returncode,
        stdout=stdout,
        stderr=stderr,
        seconds=time.perf_counter() - started,
        timed_out=timed_out,
        payload=payload,
    )


def _emit(payload: Mapping[str, Any]) -> None:
    print(_PROBE_MARK + json.dumps(payload), flush=True)


def probe_tensorflow() -> None:
    """In a probe process: report TensorFlow's versions and devices."""
    from kdist.process.quiet import filtered_stderr, stderr_noise
    from kdist.process.runtime import quiet_tensorflow

    quiet_tensorflow(2)
    import keras
    import tensorflow as tf

    with filtered_stderr(stderr_noise()):
        physical = tf.config.list_physical_devices()
    gpus = [d for d in physical if d.device_type == "GPU"]
    details = []
    for gpu in gpus:
        info = tf.config.experimental.get_device_details(gpu)
        capability = info.get("compute_capability")
        name = info.get("device_name", gpu.name)
        details.append(f"{name} (compute {capability[0]}.{capability[1]})" if capability else name)
    build = tf.sysconfig.get_build_info()
    _emit(
        {
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "backend": keras.backend.backend(),
            "built_with_cuda": bool(tf.test.is_built_with_cuda()),
            "cuda": str(build.get("cuda_version", "")),
            "cudnn": str(build.get("cudnn_version", "")),
            "cpus": sum(1 for d in physical if d.device_type == "CPU"),
            "gpus": len(gpus),
            "gpu_names": details,
            "other": sorted({d.device_type for d in physical} - {"CPU", "GPU"}),
            "logical": len(tf.config.list_logical_devices()),
        }
    )


def probe_strategy(name: str, overrides: Sequence[str]) -> None:
    """In a probe process: train the probe job under strategy `name`; report the result."""
    from kdist.process.runtime import quiet_tensorflow

    quiet_tensorflow(2)
    import kdist

    cfg = kdist.compose([f"strategy={name}", *PROBE_OVERRIDES, *overrides])
    with tempfile.TemporaryDirectory(prefix="kdist-doctor-") as run_dir:
        started = time.perf_counter()
        experiment = kdist.Experiment(cfg, run_dir=run_dir)
        experiment.fit(verbose=0)
        summary = experiment.metrics()
    _emit(
        {
            "strategy": summary["strategy"],
            "replicas": summary["num_replicas"],
            "steps": summary["steps"],
            "loss": summary["train"].get("loss"),
            "seconds": time.perf_counter() - started,
        }
    )


def strategy_options() -> list[str]:
    """The options of the `strategy` config group (the YAML files in `conf/strategy/`),
    from one device to many machines, then any others by name."""
    folder = importlib.resources.files("kdist.conf") / "strategy"
    names = [e.name.removesuffix(".yaml") for e in folder.iterdir() if e.name.endswith(".yaml")]
    order = ("one_device", "mirrored", "auto", *MULTI_PROCESS)
    return sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n))


def _replica_word(count: Any) -> str:
    return f"{count} replica" + ("" if count == 1 else "s")


def check_strategy(name: str, *, timeout: float, devices: Mapping[str, Any]) -> Check:
    """The `strategies` row of option `name`: two training steps in a time-limited probe.

    Args:
        name: an option of `conf/strategy/`.
        timeout: seconds the probe may take.
        devices: what the TensorFlow probe found (`gpus`, ...).
    """
    python = [sys.executable, "-m"]
    if name in MULTI_PROCESS:
        if importlib.util.find_spec("kdist.launch") is None:
            return Check("strategies", name, "skip", "needs kdist.launch, which is not installed")
        plan = MULTI_PROCESS[name]
        with tempfile.TemporaryDirectory(prefix="kdist-doctor-") as tmp:
            run_dir = Path(tmp) / "run"
            command = [
                *python,
                "kdist.launch",
                "--workers",
                str(plan["workers"]),
                "--ps",
                str(plan["ps"]),
                "--run-dir",
                str(run_dir),
                "--timeout",
                str(timeout),
                "--",
                f"strategy={name}",
                *PROBE_OVERRIDES,
            ]
            # A little longer than the launcher's own limit, so it can stop its tasks.
            result = run_probe(command, timeout=timeout + 30, cwd=tmp)
            metrics_file = run_dir / METRICS
            metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
        tasks = f"{plan['workers']} workers" + (f" + {plan['ps']} ps" if plan["ps"] else "")
        if result.ok and metrics:
            loss = metrics.get("train", {}).get("loss", math.nan)
            if not math.isfinite(loss):
                return Check("strategies", name, "FAIL", f"trained, but the loss is {loss}")
            return Check(
                "strategies",
                name,
                "ok",
                f"{tasks} via kdist.launch, "
                # Parameter-server training is asynchronous: no replicas in sync to count.
                + ("" if plan["ps"] else f"{_replica_word(metrics.get('num_replicas'))}, ")
                + f"{metrics.get('steps')} steps in {result.seconds:.1f} s",
            )
    else:
        overrides = []
        if name == "mirrored" and devices.get("gpus", 0) < 2:
            # Split the one CPU (or GPU) in two so the probe really has two replicas.
            overrides.append("runtime.logical_devices=2")
        command = [*python, "kdist.doctor", "--probe", name, "--", *overrides]
        result = run_probe(command, timeout=timeout)
        payload = result.payload
        if result.ok and payload:
            loss = payload.get("loss")
            if loss is None or not math.isfinite(loss):
                return Check("strategies", name, "FAIL", f"trained, but the loss is {loss}")
            return Check(
                "strategies",
                name,
                "ok",
                f"{payload['strategy']}, {_replica_word(payload['replicas'])}, "
                f"{payload['steps']} steps in {result.seconds:.1f} s",
            )
    if result.timed_out:
        return Check(
            "strategies",
            name,
            "FAIL",
            f"no result after {timeout:g} s (killed); rerun with a longer --timeout "
            "if this machine is busy",
        )
    return Check(
        "strategies",
        name,
        "FAIL",
        f"exit {result.returncode} after {result.seconds:.1f} s: {result.last_error()}",
    )
