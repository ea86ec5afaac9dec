"""Checks of a multirun's Hydra launcher (joblib, submitit) before any job starts.

`kdist train -m` hands its jobs to the launcher `hydra/launcher=...` picks. What that
launcher is given is checked here, in the command's own process, before Hydra starts:

- a key of the wrong type or out of range (`hydra.launcher.n_jobs=0`, `=two`,
  `timeout_min=-1`) is one line and status 2, not a traceback after the jobs were sent;
- `submitit_slurm` off a SLURM cluster (no `sbatch`) is one line naming the launchers that
  run here;
- what runs at once is bounded as `kdist launch --workers` is (`machine_bound`): joblib's
  `n_jobs` to the sweep's jobs and to this machine's TensorFlow processes; the tasks of one
  `submitit_local` job must fit this machine, and a sweep of more of them runs in batches
  (`hydra.sweeper.max_batch_size`). A bound applied is said in one line.

`sweep_launcher_overrides` returns the overrides that apply the bounds; `kdist.train.main`
appends them to the command line (a later override of a key wins in Hydra).
"""

from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kdist.compat.tools_private import is_basic_sweeper
from kdist.config.errors import ConfigError
from kdist.launcher.checks import machine_bound

__all__ = [
    "JOBLIB",
    "SUBMITIT_LOCAL",
    "SUBMITIT_SLURM",
    "check_launcher",
    "launcher_kind",
    "sweep_jobs",
    "sweep_launcher_overrides",
]

JOBLIB = "joblib"
SUBMITIT_LOCAL = "submitit_local"
SUBMITIT_SLURM = "submitit_slurm"
# The launchers' classes (`hydra.launcher._target_`), by the option that picks them.
_TARGETS = {
    "JoblibLauncher": JOBLIB,
    "hydra_submitit_launcher.submitit_launcher.LocalLauncher": SUBMITIT_LOCAL,
    "hydra_submitit_launcher.submitit_launcher.SlurmLauncher": SUBMITIT_SLURM,
}
# The overrides that shape the launcher and the sweeper (the rest are the jobs' own).
_HYDRA_PREFIXES = ("hydra/launcher", "hydra.launcher.", "hydra/sweeper", "hydra.sweeper.")

# submitit's keys: (whether null is valid, the smallest value, the hint's example).
_SUBMITIT_KEYS: dict[str, tuple[bool, int, str]] = {
    "timeout_min": (False, 1, "minutes a job may run, e.g. 60"),
    "nodes": (False, 1, "e.g. 1"),
    "tasks_per_node": (False, 1, "processes per node, e.g. 1"),
    "cpus_per_task": (True, 1, "e.g. 8, or null"),
    "gpus_per_node": (True, 0, "e.g. 4, or null"),
    "mem_gb": (True, 1, "e.g. 16, or null"),
    "array_parallelism": (False, 1, "jobs at a time, e.g. 256"),
}
# Hydra's wording of a value its schema cannot take, per key: the one line kdist prints.
_TYPE_HINTS = {
    "n_jobs": "give the jobs run at a time, e.g. hydra.launcher.n_jobs=2",
    **{key: f"give {hint}" for key, (_, _, hint) in _SUBMITIT_KEYS.items()},
}


def launcher_kind(launcher: Mapping[str, Any]) -> str | None:
    """`joblib`, `submitit_local`, `submitit_slurm`, or `None` (basic, or another launcher).

    Args:
        launcher: the `hydra.launcher` node.
    """
    target = str(launcher.get("_target_") or "")
    for suffix, kind in _TARGETS.items():
        if target.endswith(suffix):
            return kind
    return None


def sweep_jobs(overrides: Sequence[str], sweeper: Mapping[str, Any]) -> int | None:
    """How many jobs Hydra's basic sweeper makes of `overrides`, else `None` (not known here).

    Args:
        overrides: the command line's overrides (Hydra's grammar: `a=1,2`, `b=range(3)`).
        sweeper: the `hydra.sweeper` node (its `params` sweep too).

    Returns:
        The product of the sweeps' lengths; `None` for another sweeper (Optuna decides its
        trials as it goes) or a sweep over a glob (its options are known once composed).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not is_basic_sweeper(sweeper.get("_target_")):
        return None
    params = sweeper.get("params") or {}
    texts = [*(f"{key}={value}" for key, value in params.items()), *overrides]
    try:
        parsed = OverridesParser.create().parse_overrides(texts)
        sizes = [len(list(o.sweep_string_iterator())) for o in parsed if o.is_sweep_override()]
    except Exception:  # Hydra reports a malformed override itself; a glob needs the configs
        return None
    return math.prod(sizes)


def _whole(launcher: Mapping[str, Any], key: str) -> int | None:
    value = launcher.get(key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ConfigError(
        f"hydra.launcher.{key}", "must be a whole number", value=value, hint=_TYPE_HINTS[key]
    )


def _check_submitit(launcher: Mapping[str, Any], kind: str) -> None:
    for key, (nullable, least, _) in _SUBMITIT_KEYS.items():
        if key not in launcher:
            continue
        value = _whole(launcher, key)
        if value is None and nullable:
            continue
        if value is None or value < least:
            shown = "at least 1" if least == 1 else "0 or more"
            raise ConfigError(
                f"hydra.launcher.{key}", f"must be {shown}", value=value, hint=_TYPE_HINTS[key]
            )
    if kind == SUBMITIT_LOCAL and int(launcher.get("nodes") or 1) > 1:
        raise ConfigError(
            "hydra.launcher.nodes",
            "submitit_local runs a job on this one machine",
            value=launcher.get("nodes"),
            hint="use hydra.launcher.nodes=1 (and tasks_per_node for several tasks), or "
            "hydra/launcher=submitit_slurm on a SLURM cluster",
        )
    if kind == SUBMITIT_SLURM and shutil.which("sbatch") is None:
        raise ConfigError(
            f"hydra/launcher={SUBMITIT_SLURM}",
            "SLURM is not available here (no sbatch command on this machine's PATH)",
            hint="run on a SLURM login node, or use hydra/launcher=submitit_local or "
            "hydra/launcher=joblib to run the jobs on this machine",
        )


def check_launcher(
    launcher: Mapping[str, Any],
    *,
    jobs: int | None,
    cores: int | None = None,
    memory: int | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, int]:
    """Check the launcher's keys and bound what runs at once on this machine.

    Args:
        launcher: the composed `hydra.launcher` node.
        jobs: the sweep's jobs (`sweep_jobs`), or `None` when not known.
        cores: the cores to count. Defaults to `None`: this process's.
        memory: the bytes of memory to count. Defaults to `None`: this machine's.
        say: where the line saying a bound goes. Defaults to `None`: stderr.

    Returns:
        The keys to override (`hydra.launcher.n_jobs`, `hydra.sweeper.max_batch_size`)
        with their bounded values; empty when nothing needs a bound.

    Raises:
        ConfigError: naming the key, its value and what to give instead.
    """
    kind = launcher_kind(launcher)
    if kind is None:
        return {}
    say = say or _to_stderr
    bound, why = machine_bound(cores=cores, memory=memory)
    if kind == JOBLIB:
        asked = _whole(launcher, "n_jobs")
        if asked is None or asked == 0:
            raise ConfigError(
                "hydra.launcher.n_jobs",
                "must be at least 1 (jobs run at a time)",
                value=asked,
                hint="e.g. hydra.launcher.n_jobs=2, or -1 for one job per core",
            )
        # joblib's rule for a negative count: all cores but `-n_jobs - 1`, at least one.
        cpus = cores if cores is not None else _cores()
        wanted = asked if asked > 0 else max(1, cpus + 1 + asked)
        limits = [(bound, f"this machine holds {bound} TensorFlow processes: {why}")]
        if jobs is not None:
            limits.insert(0, (max(1, jobs), f"the sweep has {jobs} job(s)"))
        allowed, reason = min(limits, key=lambda pair: pair[0])
        if wanted <= allowed:
            return {"hydra.launcher.n_jobs": wanted} if asked < 0 else {}
        say(f"hydra.launcher.n_jobs={asked}: runs {allowed} job(s) at a time ({reason})")
        return {"hydra.launcher.n_jobs": allowed}
    _check_submitit(launcher, kind)
    if kind != SUBMITIT_LOCAL:
        return {}
    tasks = int(launcher.get("tasks_per_node") or 1)
    if tasks > bound:
        raise ConfigError(
            "hydra.launcher.tasks_per_node",
            f"starts {tasks} TensorFlow processes per job here; this machine holds at most "
            f"{bound} ({why})",
            value=tasks,
            hint=f"use {bound} or fewer, or hydra/launcher=submitit_slurm on a cluster",
        )
    if jobs is None or jobs * tasks <= bound:
        return {}
    batch = max(1, bound // tasks)
    say(
        f"hydra/launcher=submitit_local: runs the {jobs} jobs {batch} at a time "
        f"({tasks} process(es) each; this machine holds {bound} TensorFlow processes: {why})"
    )
    return {"hydra.sweeper.max_batch_size": batch}


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


def _to_stderr(line: str) -> None:
    print(f"kdist: {line}", file=sys.stderr, flush=True)


def sweep_launcher_overrides(argv: Sequence[str]) -> list[str]:
    """Check a multirun's launcher; the overrides that bound it (none for a single run).

    Composes the launcher and sweeper (`hydra/launcher`, `hydra.launcher.*` and the
    sweeper's overrides, with the config `-cd`/`-cn` name) without the jobs' own keys, so
    a sweep's values are never composed here.

    Args:
        argv: the command line (without the program name).

    Returns:
        `key=value` overrides to append to the command line.

    Raises:
        ConfigError: naming the key at fault (see `check_launcher`).
    """
    from kdist.compat.tools_private import hydra_args_parser

    args, _ = hydra_args_parser().parse_known_args(list(argv))
    if not args.multirun or args.help or args.hydra_help or args.info or args.shell_completion:
        return []
    shaping = [o for o in args.overrides if o.lstrip("+~").startswith(_HYDRA_PREFIXES)]
    picks = any(o.lstrip("+~").startswith(_HYDRA_PREFIXES[:2]) for o in shaping)
    if not picks and not (args.config_name or args.config_dir or args.config_path):
        return []  # kdist's own config: the basic launcher, nothing to bound
    hydra_cfg = _hydra_config(shaping, args.config_name, args.config_dir, args.config_path)
    if hydra_cfg is None:
        return []
    jobs = sweep_jobs(args.overrides, hydra_cfg.sweeper)
    bounded = check_launcher(hydra_cfg.launcher, jobs=jobs)
    return [f"{key}={value}" for key, value in bounded.items()]


def _hydra_config(
    overrides: list[str], config_name: str | None, config_dir: str | None, config_path: Any
) -> Any:
    """The composed `hydra` node, or `None` where kdist leaves the error to Hydra."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    from kdist.config import register
    from kdist.config.compose import CONFIG_MODULE, _initialize_with_dir, format_hydra_error
    from kdist.config.yaml_limits import config_folder

    register()
    name = config_name or "train"
    folder = config_dir or config_folder(config_path)
    try:
        if folder is None:
            with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
                cfg = hydra_compose(config_name=name, overrides=overrides, return_hydra_config=True)
        else:
            with _initialize_with_dir(Path(folder).resolve()):
                cfg = hydra_compose(config_name=name, overrides=overrides, return_hydra_config=True)
    except ConfigError:
        raise
    except Exception as error:  # Hydra and OmegaConf raise many types
        line = format_hydra_error(error)
        key = line.partition(":")[0].strip()
        last = key.rpartition(".")[2]
        if key.startswith("hydra.launcher.") and last in _TYPE_HINTS:
            given = [o.partition("=")[2] for o in overrides if o.lstrip("+").startswith(key + "=")]
            shown = {"value": given[-1]} if given else {}
            raise ConfigError(
                key, "must be a whole number", hint=_TYPE_HINTS[last], **shown
            ) from None
        if key.startswith(("hydra.launcher", "hydra/launcher")):
            raise ConfigError(key, line.partition(":")[2].strip()) from None
        return None  # another key's error: Hydra reports it as it would
    return cfg.hydra
