"""A run folder reopened: its config (trusted, with overrides) and an `Experiment` on its model.

`kdist.evaluate`, `kdist.predict` and the sidecar evaluator (`kdist.evaluation.sidecar`)
read a run this way: the config from `.hydra/config.yaml` (or `config.yaml`), refused
when a `_target_` names code outside kdist's and Keras's building blocks
(`kdist.config.trust`) unless the folder is trusted; the model from `model.keras` in
Keras safe mode.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from kdist.config.errors import ConfigError
from kdist.config.groups import TRAIN_GROUPS
from kdist.config.trust import check_trusted_targets, resolve_untrusted
from kdist.config.yaml_limits import load_config
from kdist.runs.layout import MODEL, saved_configs

__all__ = [
    "apply_overrides",
    "evaluate_run",
    "experiment_with_run_model",
    "in_one_process",
    "load_run_config",
    "load_trusted_config",
]

log = logging.getLogger(__name__)


def load_run_config(run_dir: str | os.PathLike[str]) -> DictConfig:
    """The config a run was trained with.

    Raises:
        ConfigError: naming `run_dir` when it holds no config.
    """
    folder = Path(run_dir)
    if not folder.is_dir():
        what = "is a file, not a run folder" if folder.exists() else "does not exist"
        raise ConfigError(
            "run_dir", what, value=str(run_dir), hint="give the output folder of a kdist.train run"
        )
    for candidate in saved_configs(folder):
        if candidate.is_file():
            # Within the size and alias limits (`kdist.config.yaml_limits`): an alias bomb
            # appended to it is refused before OmegaConf expands it.
            cfg = load_config(candidate, key="run_dir")
            if not isinstance(cfg, DictConfig):
                raise ConfigError("run_dir", f"holds {candidate}, which is not a mapping")
            return cfg
    raise ConfigError(
        "run_dir",
        "holds no run config (.hydra/config.yaml or config.yaml)",
        value=str(run_dir),
        hint="give the output folder of a kdist.train run",
    )


def apply_overrides(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """Apply `key=value` overrides to `cfg`; `group=option` replaces a whole group."""
    from kdist.config.compose import compose

    for override in overrides:
        key, sep, text = override.partition("=")
        if not sep or not key:
            raise ConfigError(override, "is not key=value")
        if key in TRAIN_GROUPS:
            cfg[key] = compose([f"{key}={text}"])[key]
        else:
            OmegaConf.update(cfg, key, yaml.safe_load(text) if text else None, force_add=False)


def load_trusted_config(
    run_dir: str | os.PathLike[str], overrides: Sequence[str], *, trust_run_dir: bool
) -> DictConfig:
    """A run's config with `overrides` applied, refused if it names untrusted code.

    Raises:
        ConfigError: naming the key of a `_target_` outside kdist's and Keras's
            building blocks (unless `trust_run_dir`), or `run_dir`.
    """
    cfg = load_run_config(run_dir)
    if not trust_run_dir:
        # Trust is decided on what will run: the folder's interpolations resolved now, by
        # resolvers that build no object (`kdist.config.trust.SAFE_RESOLVERS`).
        resolved = resolve_untrusted(cfg, source=str(run_dir))
        assert isinstance(resolved, DictConfig)
        cfg = resolved
    apply_overrides(cfg, overrides)
    if not trust_run_dir:
        # Before anything imports or calls a target; the user's own overrides are theirs.
        exempt = tuple(o.partition("=")[0].lstrip("+~") for o in overrides)
        check_trusted_targets(cfg, source=str(run_dir), exempt=exempt, run_dir=run_dir)
    return cfg


# Strategies whose config names a cluster: reading a run in one process replaces them.
_CLUSTER_STRATEGIES = ("multi_worker_mirrored", "parameter_server")


def in_one_process(cfg: DictConfig, *, why: str) -> None:
    """Replace a multi-worker or parameter-server strategy by `one_device` (logged).

    `kdist.predict` and the sidecar evaluator read a run in one process, which needs no
    cluster; a strategy given as an override that is not a cluster one stays.
    """
    target = str(cfg.strategy.get("_target_", ""))
    if target.rsplit(".", 1)[-1] in _CLUSTER_STRATEGIES:
        log.info("%s: strategy=one_device instead of %s", why, target)
        apply_overrides(cfg, ["strategy=one_device"])


def experiment_with_run_model(
    run_dir: str | os.PathLike[str], cfg: DictConfig, *, needs_validation: bool = False
) -> Any:
    """An `Experiment` for `cfg` whose model is the run's `model.keras` (safe mode).

    Raises:
        ConfigError: naming `run_dir` without `model.keras`, or `data.source` without
            validation examples when `needs_validation`.
    """
    from kdist.evaluation.export import load_model
    from kdist.experiment import Experiment

    model_path = Path(run_dir) / MODEL
    if not model_path.is_file():
        raise ConfigError(
            "run_dir",
            "holds no model.keras",
            value=str(run_dir),
            hint="the run must finish with callbacks.save_model=true",
        )
    experiment = Experiment(cfg, run_dir=Path(run_dir))
    if needs_validation and experiment.source.size("validation") < 1:
        raise ConfigError("data.source", "has no validation examples to evaluate on")
    with experiment.strategy.scope():
        model = load_model(model_path)
    experiment.build_model(model=model)
    return experiment


def evaluate_run(
    run_dir: str | os.PathLike[str],
    overrides: Sequence[str] = (),
    *,
    trust_run_dir: bool = False,
) -> dict[str, float]:
    """Evaluate a finished run's `model.keras` on its validation data.

    Args:
        run_dir: the run's output folder.
        overrides: `key=value` or `group=option` changes to the run's config.
            Defaults to `()`.
        trust_run_dir: rebuild the config even when a `_target_` names code outside
            kdist and Keras. Defaults to `False`.

    Returns:
        The validation metrics, e.g. `{"loss": ..., "accuracy": ...}`.

    Raises:
        ConfigError: naming `run_dir` or the key at fault.
    """
    cfg = load_trusted_config(run_dir, overrides, trust_run_dir=trust_run_dir)
    experiment = experiment_with_run_model(run_dir, cfg, needs_validation=True)
    return experiment.evaluate()
