"""`python -m kdist.doctor`: is this install able to train, and under which strategies?

It prints one table: the versions of Python and of kdist's dependencies (against the
versions kdist requires), known-bad combinations, the devices TensorFlow sees, a short
training run under every strategy in `conf/strategy/` (each in its own process with a
time limit, so a hang cannot stall the doctor), and the cluster environment (TF_CONFIG,
SLURM, Kubernetes). It exits with status 1 when a required check fails, else 0.

The doctor's own process never imports TensorFlow: a broken install shows up as a
failed row instead of a crash.

Example:

```bash
python -m kdist.doctor                          # everything
python -m kdist.doctor --strategies mirrored    # probe one strategy
python -m kdist.doctor --no-probes --json       # versions, devices and cluster as JSON
```
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as metadata
import importlib.resources
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

__all__ = [
    "MULTI_PROCESS",
    "PROBE_OVERRIDES",
    "RULES",
    "Check",
    "ProbeResult",
    "check_cluster",
    "check_rules",
    "check_versions",
    "main",
    "render",
    "requirements",
    "run_doctor",
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
# Every distribution that installs the `tensorflow` package; two of them overwrite
# each other's files.
TF_DISTRIBUTIONS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-intel",
    "tensorflow-macos",
    "tf-nightly",
    "tf-nightly-cpu",
)
# kdist's runtime requirements, for a source tree that is not pip-installed (a test
# checks that it matches pyproject.toml).
FALLBACK_REQUIREMENTS = (
    "tensorflow>=2.21,<2.22",
    "keras>=3.15,<4",
    "keras-tuner>=1.4.7",
    "tensorboard>=2.21",
    "hydra-core>=1.3.2,<1.4",
    "scikit-learn>=1.3",
    "matplotlib>=3.7",
    "packaging>=23",
)
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
_PROBE_MARK = "kdist-doctor-probe: "
_STATUSES = ("ok", "info", "skip", "warn", "FAIL")


@dataclass
class Check:
    """One row of the doctor's table.

    Attributes:
        section: `versions`, `compatibility`, `devices`, `strategies` or `cluster`.
        name: what was checked.
        status: `ok`, `info`, `skip`, `warn` or `FAIL` (only `FAIL` makes the exit
            status non-zero).
        detail: what was found, and for a problem what to do.
    """

    section: str
    name: str
    status: str
    detail: str

    def __post_init__(self) -> None:
        if self.status not in _STATUSES:
            raise ValueError(f"`status` ({self.status!r}) must be one of {', '.join(_STATUSES)}.")


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
        from kdist.quiet import stderr_noise

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


# --- versions and known-bad combinations --------------------------------------------------


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def requirements() -> tuple[list[Requirement], bool]:
    """kdist's runtime requirements and whether they come from its installed metadata."""
    try:
        declared = metadata.requires("kdist") or []
        from_metadata = True
    except metadata.PackageNotFoundError:
        declared, from_metadata = list(FALLBACK_REQUIREMENTS), False
    found = []
    for text in declared:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        # Extras (`dev`) are tools for developers, not needed to train.
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        found.append(requirement)
    return found, from_metadata


def check_versions(
    installed: Callable[[str], str | None] = _installed,
    reqs: Sequence[Requirement] | None = None,
) -> list[Check]:
    """Rows for Python, kdist and each runtime requirement against the installed versions.

    Args:
        installed: distribution name -> installed version or `None`.
            Defaults to reading the environment's package metadata.
        reqs: the requirements. Defaults to `None`: kdist's own (`requirements()`).
    """
    rows = []
    python = platform.python_version()
    rows.append(
        Check(
            "versions",
            "python",
            "ok" if sys.version_info >= (3, 10) else "FAIL",
            f"{python} ({sys.executable})"
            + ("" if sys.version_info >= (3, 10) else "; kdist needs Python >= 3.10"),
        )
    )
    from_metadata = True
    if reqs is None:
        reqs, from_metadata = requirements()
    kdist_version = installed("kdist")
    rows.append(
        Check(
            "versions",
            "kdist",
            "ok" if from_metadata else "warn",
            kdist_version
            if from_metadata and kdist_version
            else "not pip-installed: run `pip install -e .` (or `make install`) in the repo",
        )
    )
    for req in reqs:
        version = installed(req.name)
        # ">=2.21,<2.22" reads better than packaging's sorted "<2.22,>=2.21".
        wanted = ",".join(sorted(map(str, req.specifier), key=lambda c: c[0] != ">")) or "any"
        install = f"pip install '{req.name}{req.specifier}'"
        if version is None:
            rows.append(Check("versions", req.name, "FAIL", f"missing; {install}"))
            continue
        try:
            fits = req.specifier.contains(Version(version), prereleases=True)
        except InvalidVersion:
            fits = False
        detail = f"{version} (kdist needs {wanted})"
        if not fits:
            detail += f"; {install}"
        rows.append(Check("versions", req.name, "ok" if fits else "FAIL", detail))
    return rows


def _version(text: str | None) -> Version | None:
    if text is None:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


@dataclass(frozen=True)
class Rule:
    """A known-bad combination: `find(facts)` returns what is wrong here, or `None`."""

    name: str
    status: str
    find: Callable[[Mapping[str, Any]], str | None]


def _minor(text: str | None) -> tuple[int, int] | None:
    version = _version(text)
    return (version.major, version.minor) if version else None


def _several_tensorflows(facts: Mapping[str, Any]) -> str | None:
    found = [d for d in TF_DISTRIBUTIONS if facts["versions"].get(d)]
    if len(found) < 2:
        return None
    return (
        f"{', '.join(found)} are all installed and overwrite each other's files; "
        "uninstall all but `tensorflow`"
    )


def _keras_2(facts: Mapping[str, Any]) -> str | None:
    version = _version(facts["versions"].get("keras"))
    if version is None or version.major >= 3:
        return None
    return f"keras {version} is Keras 2; kdist needs Keras 3: pip install 'keras>=3.15,<4'"


def _other_backend(facts: Mapping[str, Any]) -> str | None:
    backend = facts.get("backend")
    if backend in (None, "tensorflow"):
        return None
    return (
        f"Keras runs on the {backend} backend; kdist trains with TensorFlow: set "
        "KERAS_BACKEND=tensorflow (or the backend in ~/.keras/keras.json)"
    )


def _old_tuner(facts: Mapping[str, Any]) -> str | None:
    version = _version(facts["versions"].get("keras-tuner"))
    if version is None or version >= Version("1.4"):
        return None
    return f"keras-tuner {version} predates Keras 3: pip install 'keras-tuner>=1.4.7'"


def _legacy_keras(facts: Mapping[str, Any]) -> str | None:
    if facts["env"].get("TF_USE_LEGACY_KERAS", "").lower() not in ("1", "true"):
        return None
    return (
        "TF_USE_LEGACY_KERAS is set: `tf.keras` means tf_keras (Keras 2) here while kdist "
        "builds with Keras 3 (`import keras`); do not mix their objects"
    )


def _tensorboard_mismatch(facts: Mapping[str, Any]) -> str | None:
    versions = facts["versions"]
    board, flow = _minor(versions.get("tensorboard")), _minor(versions.get("tensorflow"))
    if board is None or flow is None or board == flow:
        return None
    return (
        f"tensorboard {versions['tensorboard']} with tensorflow {versions['tensorflow']}: "
        "install the same minor version"
    )


def _unseen_gpu(facts: Mapping[str, Any]) -> str | None:
    if not facts.get("nvidia_smi") or facts.get("gpus") != 0:
        return None
    build = (
        ""
        if facts.get("built_with_cuda")
        else " (this TensorFlow is built without CUDA: pip install 'tensorflow[and-cuda]')"
    )
    return (
        f"nvidia-smi is installed but TensorFlow sees no GPU{build}; check "
        "CUDA_VISIBLE_DEVICES and the driver"
    )


RULES: tuple[Rule, ...] = (
    Rule("several TensorFlow packages", "FAIL", _several_tensorflows),
    Rule("Keras 2", "FAIL", _keras_2),
    Rule("Keras backend not TensorFlow", "FAIL", _other_backend),
    Rule("keras-tuner before 1.4", "FAIL", _old_tuner),
    Rule("TF_USE_LEGACY_KERAS", "warn", _legacy_keras),
    Rule("TensorBoard/TensorFlow mismatch", "warn", _tensorboard_mismatch),
    Rule("GPU not seen by TensorFlow", "warn", _unseen_gpu),
)


def check_rules(facts: Mapping[str, Any], rules: Sequence[Rule] = RULES) -> list[Check]:
    """A row per known-bad combination found, or one `ok` row when there is none.

    Args:
        facts: `versions` (distribution -> version or None), `env` (the environment),
            `nvidia_smi` (whether nvidia-smi is on the PATH), and from the TensorFlow
            probe when it ran: `backend`, `gpus`, `built_with_cuda`.
        rules: the rules. Defaults to `RULES`.
    """
    rows = []
    for rule in rules:
        problem = rule.find(facts)
        if problem:
            rows.append(Check("compatibility", rule.name, rule.status, problem))
    if not rows:
        rows.append(
            Check(
                "compatibility",
                "known-bad combinations",
                "ok",
                f"none of the {len(rules)} known found",
            )
        )
    return rows


# --- probes -------------------------------------------------------------------------------


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


def _probe_tensorflow() -> None:
    """In a probe process: report TensorFlow's versions and devices."""
    from kdist.quiet import filtered_stderr, stderr_noise
    from kdist.runtime import quiet_tensorflow

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


def _probe_strategy(name: str, overrides: Sequence[str]) -> None:
    """In a probe process: train the probe job under strategy `name`; report the result."""
    from kdist.runtime import quiet_tensorflow

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


def _check_strategy(name: str, *, timeout: float, devices: Mapping[str, Any]) -> Check:
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
            metrics_file = run_dir / "metrics.json"
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


# --- devices and cluster ------------------------------------------------------------------


def _device_rows(result: ProbeResult | None, timeout: float) -> tuple[list[Check], dict[str, Any]]:
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
            Defaults to `None`: `kdist.sandbox.isolation_support`.
    """
    from kdist.sandbox import isolation_support

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


# --- the table ----------------------------------------------------------------------------


def run_doctor(
    *,
    strategies: Sequence[str] | None = None,
    probes: bool = True,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Check]:
    """Run every check and return the rows of the table.

    Args:
        strategies: the strategy options to probe. Defaults to `None`: every option in
            `conf/strategy/`.
        probes: start TensorFlow in subprocesses (devices and strategies). Defaults to
            `True`.
        timeout: seconds each probe may take. Defaults to `120.0`.
        env: the environment to report on. Defaults to `None`: `os.environ`.
        progress: called with a short message before each probe. Defaults to `None`.

    Returns:
        The `Check` rows, in table order.

    Raises:
        ValueError: for a strategy that is not an option of `conf/strategy/`.
    """
    env = os.environ if env is None else env
    known = strategy_options()
    chosen = list(known) if strategies is None else list(strategies)
    unknown = [s for s in chosen if s not in known]
    if unknown:
        raise ValueError(f"no strategy option {', '.join(unknown)}; options: {', '.join(known)}")
    say = progress or (lambda message: None)
    rows = check_versions()
    if probes:
        say("starting TensorFlow")
    tf_result = (
        run_probe([sys.executable, "-m", "kdist.doctor", "--probe-tensorflow"], timeout=timeout)
        if probes
        else None
    )
    device_rows, info = _device_rows(tf_result, timeout)
    facts: dict[str, Any] = {
        "versions": {
            name: _installed(name)
            for name in {*TF_DISTRIBUTIONS, "keras", "keras-tuner", "tensorboard"}
        },
        "env": dict(env),
        "nvidia_smi": shutil.which("nvidia-smi") is not None,
        **{k: info[k] for k in ("backend", "gpus", "built_with_cuda") if k in info},
    }
    rows += check_rules(facts)
    rows += device_rows
    if not probes:
        rows += [Check("strategies", n, "skip", "not probed (--no-probes)") for n in chosen]
    elif not info:
        rows += [Check("strategies", n, "skip", "TensorFlow does not start") for n in chosen]
    else:
        say(f"training 2 steps with strategy={', '.join(chosen)}")
        # Two single-process probes at a time (they mostly wait for TensorFlow to start);
        # a multi-process probe runs alone, as its tasks must not starve each other.
        single = [n for n in chosen if n not in MULTI_PROCESS]
        with ThreadPoolExecutor(max_workers=2) as pool:
            found = dict(
                zip(
                    single,
                    pool.map(lambda n: _check_strategy(n, timeout=timeout, devices=info), single),
                    strict=True,
                )
            )
        for name in chosen:
            if name not in found:
                found[name] = _check_strategy(name, timeout=timeout, devices=info)
        rows += [found[name] for name in chosen]
    rows += check_cluster(env)
    rows.append(check_launch_network())
    return rows


def render(rows: Sequence[Check], *, color: bool = False) -> str:
    """The rows as a text table with a closing verdict line.

    Args:
        rows: the `Check` rows.
        color: colour the status column with ANSI codes. Defaults to `False`.
    """
    colors = {"ok": "32", "warn": "33", "FAIL": "31;1", "skip": "2", "info": "36"}
    widths = [
        max(len("section"), *(len(r.section) for r in rows)),
        max(len("check"), *(len(r.name) for r in rows)),
        max(len("status"), *(len(s) for s in _STATUSES)),
    ]
    header = f"{'section':<{widths[0]}}  {'check':<{widths[1]}}  {'status':<{widths[2]}}  detail"
    lines = [header, "  ".join("-" * w for w in [*widths, 40])]
    previous = None
    for row in rows:
        section = row.section if row.section != previous else ""
        previous = row.section
        status = f"{row.status:<{widths[2]}}"
        if color:
            status = f"\x1b[{colors[row.status]}m{status}\x1b[0m"
        lines.append(f"{section:<{widths[0]}}  {row.name:<{widths[1]}}  {status}  {row.detail}")
    failures = sum(r.status == "FAIL" for r in rows)
    warnings = sum(r.status == "warn" for r in rows)
    verdict = f"{failures} required check(s) failed" if failures else "every required check passed"
    if warnings:
        verdict += f"; {warnings} warning(s)"
    lines += ["", f"kdist doctor: {verdict}"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m kdist.doctor`."""
    parser = argparse.ArgumentParser(
        prog="python -m kdist.doctor",
        description="Check that this install can train with kdist, and under which strategies.",
    )
    parser.add_argument(
        "--strategies",
        default=None,
        help="comma-separated strategy options to probe (default: every option)",
    )
    parser.add_argument(
        "--no-probes", action="store_true", help="do not start TensorFlow (no devices, no runs)"
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds each probe may take (default 120)"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe-tensorflow", action="store_true", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.probe_tensorflow:
        _probe_tensorflow()
        return
    if args.probe:
        _probe_strategy(args.probe, [a for a in rest if a != "--"])
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.timeout <= 0:
        parser.error(f"--timeout ({args.timeout}) must be positive")
    strategies = (
        [s.strip() for s in args.strategies.split(",") if s.strip()] if args.strategies else None
    )

    def progress(message: str) -> None:
        # On a terminal only: a log file or a test reads just the table.
        if sys.stderr.isatty():
            print(f"kdist doctor: {message} ...", file=sys.stderr, flush=True)

    try:
        rows = run_doctor(
            strategies=strategies,
            probes=not args.no_probes,
            timeout=args.timeout,
            progress=progress,
        )
    except ValueError as error:
        parser.error(str(error))
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        print(render(rows, color=color))
    raise SystemExit(1 if any(r.status == "FAIL" for r in rows) else 0)


if __name__ == "__main__":
    main()
