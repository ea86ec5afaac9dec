"""A resumed run trains what it trained before, and what it says it changed is changed.

A backup holds the weights and optimizer state of a run; resuming it with another model,
data, optimizer or seed would silently mix two experiments. The chief saves the resolved
config beside the checkpoints (`backup/config.yaml`, `checkpoints/config.yaml`) once the
run is accepted, and a run that finds checkpoints compares its config with that copy; a
folder written before those copies existed is compared with its `.hydra/config.yaml`
(which kdist now writes only once a run is accepted), and a folder with checkpoints and
no config at all is refused, saying what cannot be checked.

Keys that may change on resume: how long and how verbosely to train
(`trainer.epochs`, `trainer.verbose`, `trainer.validation*`, `trainer.steps_per_execution`),
`callbacks.*`, the strategy and devices (`strategy.*`, `runtime.logical_devices`,
`runtime.memory_growth`, `runtime.tf_log_level`; resuming on another strategy is a feature),
`objective.*` and `run_dir`. `trainer.allow_resume_changes=true` allows any other change,
and the change is applied: the data, model and loss are built from the new config, the
optimizer's hyperparameters (`beta_1`, a schedule, ...) are its constructor's, and the
learning rate, which the checkpoint holds, is set again after the restore
(`apply_allowed_changes`). A change the checkpoint's optimizer state cannot take (another
optimizer class, a constant learning rate turned into a schedule, loss scaling, EMA or
momentum slots added or removed, Adagrad's `initial_accumulator_value`, whose accumulators
the checkpoint holds) is refused with one line instead. `tests/test_trust_resume_changes.py`
checks each optimizer key against a run that started from the same checkpoint with it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from kdist.compat.keras_private import learning_rate_variable
from kdist.config.errors import ConfigError
from kdist.config.trust import safe_resolvers
from kdist.config.yaml_limits import check_yaml_file
from kdist.runs.fileio import write_text_atomic
from kdist.runs.layout import CONFIG, SAVE_FOLDERS, saved_configs

__all__ = [
    "ALLOW_KEY",
    "MAY_CHANGE",
    "accepted_message",
    "apply_allowed_changes",
    "changed_keys",
    "check_resume",
    "holds_checkpoints",
    "optimizer_hyperparameters",
    "save_config",
]

log = logging.getLogger(__name__)

ALLOW_KEY = "trainer.allow_resume_changes"
CONFIG_NAME = CONFIG
FOLDERS = SAVE_FOLDERS
# Dotted keys (and everything under them) that do not change what is trained.
MAY_CHANGE = (
    "trainer.epochs",
    "trainer.verbose",
    "trainer.validation",
    "trainer.validation_freq",
    "trainer.steps_per_execution",
    "trainer.allow_foreign_files",
    ALLOW_KEY,
    "callbacks",
    "strategy",
    "runtime.logical_devices",
    "runtime.memory_growth",
    "runtime.tf_log_level",
    "objective",
    "tuner",
    "run_dir",
)
# Marks "the saved config is unknown" in the accepted changes.
UNKNOWN = "*"


def _flatten(node: Any, key: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        if not node and key:
            return {key: {}}
        flat: dict[str, Any] = {}
        for name, value in node.items():
            flat.update(_flatten(value, f"{key}.{name}" if key else str(name)))
        return flat
    return {key: node}


def _may_change(key: str) -> bool:
    return any(key == k or key.startswith(f"{k}.") for k in MAY_CHANGE)


def _plain(cfg: DictConfig | dict[str, Any]) -> dict[str, Any]:
    if isinstance(cfg, DictConfig):
        try:
            # The saved config comes from the folder: only resolvers that build nothing
            # (`kdist.config.trust.SAFE_RESOLVERS`), for it and the new one alike.
            with safe_resolvers():
                container = OmegaConf.to_container(cfg, resolve=True)
        except Exception:  # an interpolation only Hydra (or `oc.env`) resolves: as written
            container = OmegaConf.to_container(cfg, resolve=False)
        assert isinstance(container, dict)
        return {str(k): v for k, v in container.items()}
    return cfg


def changed_keys(saved: DictConfig | dict[str, Any], new: DictConfig | dict[str, Any]) -> list[str]:
    """The dotted keys whose values differ and which a resume may not change, sorted."""
    before, after = _flatten(_plain(saved)), _flatten(_plain(new))
    return sorted(
        key
        for key in set(before) | set(after)
        if not _may_change(key) and before.get(key, None) != after.get(key, None)
    )


def _optimizer_layout(cfg: dict[str, Any]) -> dict[str, Any]:
    """What decides the optimizer's variables in a checkpoint (their number and order)."""
    optimizer = cfg.get("optimizer") or {}
    runtime = cfg.get("runtime") or {}
    constant = optimizer.get("schedule") in (None, "none") and not optimizer.get("warmup_steps")
    return {
        "optimizer._target_": optimizer.get("_target_"),
        "optimizer.schedule": "a constant rate" if constant else "a schedule",
        "runtime.mixed_precision": (
            "loss scaling" if runtime.get("mixed_precision") == "mixed_float16" else "none"
        ),
        "optimizer.use_ema": bool(optimizer.get("use_ema")),
        "optimizer.amsgrad": bool(optimizer.get("amsgrad")),
        "optimizer.momentum": "momentum slots" if optimizer.get("momentum") else "none",
        # Adagrad's accumulators start at it, and the checkpoint holds them.
        "optimizer.initial_accumulator_value": optimizer.get("initial_accumulator_value"),
    }


def _has_checkpoints(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("ckpt-*.index"))


def holds_checkpoints(run_dir: str | os.PathLike[str]) -> bool:
    """Whether a run in `run_dir` would resume checkpoints (which `check_resume` checks)."""
    return any(_has_checkpoints(Path(run_dir) / name) for name in FOLDERS)


def _damaged(path: Path, why: str) -> ConfigError:
    return ConfigError(
        "hydra.run.dir",
        f"holds checkpoints whose saved config {path} is damaged ({why})",
        value=str(path.parent.parent),
        hint=f"remove {path.parent} to resume from the run's other saves, or use a new run dir",
    )


def _load(path: Path) -> DictConfig:
    check_yaml_file(path, key="hydra.run.dir")  # within the size and alias limits
    text = path.read_bytes()
    try:
        saved = OmegaConf.create(text.decode("utf-8")) if text.strip() else None
    except Exception as error:  # YAML errors of many types, bytes that are not UTF-8
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise _damaged(path, f"does not read as YAML: {first[:120]}") from None
    if not isinstance(saved, DictConfig):
        raise _damaged(path, "empty, or not a mapping of config keys")
    if not text.endswith(b"\n"):  # kdist writes it whole (`save_config`), newline last
        raise _damaged(path, "cut short: it does not end with a newline")
    return saved


def _saved_config(run_dir: Path) -> tuple[Path, DictConfig] | bool | None:
    """The config the folder's checkpoints were trained with: `(path, config)`.

    `None` when the folder holds no checkpoint; `False` when it holds some but no config
    says how they were trained.
    """
    folders = [run_dir / name for name in FOLDERS if _has_checkpoints(run_dir / name)]
    if not folders:
        return None
    for folder in folders:
        if (folder / CONFIG_NAME).is_file():
            return folder / CONFIG_NAME, _load(folder / CONFIG_NAME)
    # Written before kdist saved a copy beside the checkpoints.
    for path in saved_configs(run_dir):
        if path.is_file():
            return path, _load(path)
    return False


def check_resume(run_dir: str | os.PathLike[str], cfg: DictConfig) -> list[str]:
    """Refuse to resume `run_dir`'s checkpoints with a config that changes what is trained.

    Reads only: nothing in the folder changes. A run checks once, under its folder's lock
    (`kdist.run_setup.RunSetup.checked_in`); the restore logs what it accepted
    (`accepted_message`).

    Args:
        run_dir: the run folder.
        cfg: the new run's composed config.

    Returns:
        The changed keys `trainer.allow_resume_changes=true` accepted (`UNKNOWN` when the
        checkpoints have no saved config), for `apply_allowed_changes`; empty when none.

    Raises:
        ConfigError: listing the changed keys, unless `trainer.allow_resume_changes` is
            true; naming a change the checkpoints' optimizer state cannot take; or saying
            that the folder's checkpoints have no saved config to compare with.
    """
    allowed = bool(OmegaConf.select(cfg, ALLOW_KEY, default=False))
    found = _saved_config(Path(run_dir))
    if found is None:
        return []
    if found is False:
        if not allowed:
            raise ConfigError(
                "hydra.run.dir",
                "holds checkpoints but no saved config (backup/config.yaml, "
                ".hydra/config.yaml): cannot check that they were trained with these settings",
                value=str(run_dir),
                hint=f"another hydra.run.dir, or {ALLOW_KEY}=true to resume them as configured",
            )
        return [UNKNOWN]
    assert not isinstance(found, bool)
    path, saved = found
    changed = changed_keys(saved, cfg)
    if not changed:
        return []
    shown = _shown(changed)
    if not allowed:
        raise ConfigError(
            "hydra.run.dir",
            f"holds checkpoints trained with other settings ({path}); changed: {shown}",
            value=str(run_dir),
            hint=f"use the run's settings, another hydra.run.dir, or {ALLOW_KEY}=true",
        )
    before, after = _optimizer_layout(_plain(saved)), _optimizer_layout(_plain(cfg))
    for name in before:
        if before[name] != after[name]:
            raise ConfigError(
                name,
                f"cannot change on resume ({before[name]} -> {after[name]}): the "
                f"checkpoints in {run_dir} hold the optimizer state of the other one",
                value=OmegaConf.select(cfg, name, default=None),
                hint="keep it, or train in another hydra.run.dir",
            )
    return changed


def _shown(changed: Sequence[str]) -> str:
    shown = ", ".join(changed[:12])
    return shown + (f" and {len(changed) - 12} more" if len(changed) > 12 else "")


def accepted_message(changed: Sequence[str]) -> str | None:
    """The line a resume logs for the changes `check_resume` accepted, or `None`."""
    if not changed:
        return None
    if UNKNOWN in changed:
        return f"resuming checkpoints without a saved config ({ALLOW_KEY}=true)"
    return f"resuming with changed settings ({ALLOW_KEY}=true): {_shown(changed)}"


def optimizer_hyperparameters(optimizer: Any) -> dict[str, float]:
    """The hyperparameters a checkpoint holds and a restore overwrites: the learning rate
    of an optimizer built with a constant one. Read before the restore."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's
    rate = learning_rate_variable(inner)
    if rate is None or not hasattr(rate, "assign") or not hasattr(rate, "numpy"):
        return {}  # a schedule: built from the new config, not restored
    return {"learning_rate": float(rate.numpy())}


def apply_allowed_changes(
    changed: Sequence[str], optimizer: Any, configured: dict[str, float]
) -> list[str]:
    """After a restore: set again what an allowed change changed and the checkpoint reset.

    Args:
        changed: the changes `check_resume` accepted.
        optimizer: the restored optimizer.
        configured: `optimizer_hyperparameters(optimizer)` read before the restore.

    Returns:
        The keys set again (e.g. `["optimizer.learning_rate"]`), each logged.
    """
    if not any(k == UNKNOWN or k.startswith("optimizer.") for k in changed):
        return []  # the restored rate is the run's own (a callback may have lowered it)
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    applied = []
    for name, value in configured.items():
        variable = getattr(inner, f"_{name}")
        restored = float(variable.numpy())
        if restored != value:
            variable.assign(value)
            log.warning(
                "resuming with optimizer.%s %g as configured (the checkpoint held %g)",
                name,
                value,
                restored,
            )
            applied.append(f"optimizer.{name}")
    return applied


def save_config(run_dir: str | os.PathLike[str], cfg: DictConfig) -> None:
    """Save the resolved config beside the checkpoints (the chief, once the run is accepted)."""
    text = OmegaConf.to_yaml(cfg, resolve=True)
    for name in FOLDERS:
        write_text_atomic(Path(run_dir) / name / CONFIG_NAME, text)
