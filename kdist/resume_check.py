"""A resumed run trains what it trained before: compare its config with the saved one.

A backup holds the weights and optimizer state of a run; resuming it with another model,
data, optimizer or seed would silently mix two experiments (`.hydra/config.yaml` is
rewritten by Hydra at every start, so it cannot tell). The chief saves the resolved
config beside the checkpoints (`backup/config.yaml`, `checkpoints/config.yaml`) when
training starts, and a run that finds checkpoints compares its config with that copy.

Keys that may change on resume: how long and how verbosely to train
(`trainer.epochs`, `trainer.verbose`, `trainer.validation*`, `trainer.steps_per_execution`),
`callbacks.*`, the strategy and devices (`strategy.*`, `runtime.logical_devices`,
`runtime.memory_growth`, `runtime.tf_log_level`; resuming on another strategy is a feature),
`objective.*` and `run_dir`. `trainer.allow_resume_changes=true` allows any other change.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from kdist.config.errors import ConfigError
from kdist.fileio import write_text_atomic

__all__ = ["ALLOW_KEY", "MAY_CHANGE", "changed_keys", "check_resume", "save_config"]

log = logging.getLogger(__name__)

ALLOW_KEY = "trainer.allow_resume_changes"
CONFIG_NAME = "config.yaml"
FOLDERS = ("backup", "checkpoints")
# Dotted keys (and everything under them) that do not change what is trained.
MAY_CHANGE = (
    "trainer.epochs",
    "trainer.verbose",
    "trainer.validation",
    "trainer.validation_freq",
    "trainer.steps_per_execution",
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
        container = OmegaConf.to_container(cfg, resolve=True)
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


def _has_checkpoints(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("ckpt-*.index"))


def _saved_config(run_dir: Path) -> tuple[Path, DictConfig] | None:
    for name in FOLDERS:
        path = run_dir / name / CONFIG_NAME
        if _has_checkpoints(run_dir / name) and path.is_file():
            saved = OmegaConf.load(path)
            assert isinstance(saved, DictConfig)
            return path, saved
    return None


def check_resume(run_dir: str | os.PathLike[str], cfg: DictConfig) -> None:
    """Refuse to resume `run_dir`'s checkpoints with a config that changes what is trained.

    Args:
        run_dir: the run folder.
        cfg: the new run's composed config.

    Raises:
        ConfigError: listing the changed keys, unless `trainer.allow_resume_changes` is
            true (then the changes are logged).
    """
    found = _saved_config(Path(run_dir))
    if found is None:
        return
    path, saved = found
    changed = changed_keys(saved, cfg)
    if not changed:
        return
    shown = ", ".join(changed[:12])
    if len(changed) > 12:
        shown += f" and {len(changed) - 12} more"
    if OmegaConf.select(cfg, ALLOW_KEY, default=False):
        log.warning("resuming with changed settings (%s=true): %s", ALLOW_KEY, shown)
        return
    raise ConfigError(
        "hydra.run.dir",
        f"holds checkpoints trained with other settings ({path}); changed: {shown}",
        value=str(run_dir),
        hint=f"use the run's settings, another hydra.run.dir, or {ALLOW_KEY}=true",
    )


def save_config(run_dir: str | os.PathLike[str], cfg: DictConfig) -> None:
    """Save the resolved config beside the checkpoints (the chief, as training starts)."""
    text = OmegaConf.to_yaml(cfg, resolve=True)
    for name in FOLDERS:
        write_text_atomic(Path(run_dir) / name / CONFIG_NAME, text)
