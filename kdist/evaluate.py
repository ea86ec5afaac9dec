"""`python -m kdist.evaluate run_dir=...`: reload a finished run's model and evaluate it.

The run's config (`.hydra/config.yaml`, or `config.yaml` for a run from the Python API)
rebuilds the strategy and the validation data; the model is the run's `model.keras`,
loaded in Keras safe mode. The validation metrics are printed one per line,
`validation <name>: <value>`, and match the run's `metrics.json`.

Further arguments override the run's config: `key=value` for any key, and
`group=option` replaces a whole group (e.g. `strategy=one_device` to evaluate a
multi-worker run in one process).

A run folder may come from someone else: its config is rebuilt only when every
`_target_` names a kdist or Keras building block (`kdist.config.trust`), else the command
stops with status 2 naming the key. `trust_run_dir=true` lifts that check for a folder
you trust (its config can then run any importable code, as a training config can).

With `watch=true` it is a sidecar evaluator (`kdist.evaluation.sidecar`): it evaluates every
checkpoint of a run that is still training, as each appears, into `eval.csv` and
`tensorboard/eval/`, and stops when the run has finished (`poll_seconds=5`,
`timeout=` seconds to give up).

Example:

```bash
python -m kdist.evaluate run_dir=outputs/2026-11-21/10-00-00 watch=true
python -m kdist.evaluate run_dir=outputs/2026-11-21/10-00-00
python -m kdist.evaluate run_dir=outputs/2026-11-21/10-00-00 strategy=one_device
python -m kdist.evaluate run_dir=runs/from-a-colleague trust_run_dir=true   # custom model code
```
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from kdist.config.errors import ConfigError, exit_with
from kdist.config.groups import TRAIN_GROUPS
from kdist.config.trust import TRUST_FLAG, check_trusted_targets
from kdist.process.runtime import quiet_tensorflow
from kdist.runs.fileio import LinkError

__all__ = [
    "apply_overrides",
    "evaluate_run",
    "experiment_with_run_model",
    "in_one_process",
    "load_run_config",
    "load_trusted_config",
    "main",
]

log = logging.getLogger(__name__)


def load_run_config(run_dir: str | os.PathLike[str]) -> DictConfig:
    """The config a run was trained with.

    Raises:
        ConfigError: naming `run_dir` when it holds no config.
    """
    folder = Path(run_dir)
    if not folder.is_dir():
        raise ConfigError("run_dir", "is not a folder", value=str(run_dir))
    for candidate in (folder / ".hydra" / "config.yaml", folder / "config.yaml"):
        if candidate.is_file():
            cfg = OmegaConf.load(candidate)
            assert isinstance(cfg, DictConfig)
            return cfg
    raise ConfigError(
        "run_dir",
        "holds no run config (.hydra/config.yaml or config.yaml)",
        value=str(run_dir),
        hint="give the output folder of a kdist.train run",
    )


def apply_overrides(cfg: DictConfig, overrides: Sequence[str]) -> None:
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
    apply_overrides(cfg, overrides)
    if not trust_run_dir:
        # Before anything imports or calls a target; the user's own overrides are theirs.
        exempt = tuple(o.partition("=")[0].lstrip("+~") for o in overrides)
        check_trusted_targets(cfg, source=str(run_dir), exempt=exempt)
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
    from kdist.experiment import Experiment
    from kdist.export import load_model

    model_path = Path(run_dir) / "model.keras"
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


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m kdist.evaluate run_dir=... [overrides]`."""
    args = list(sys.argv[1:] if argv is None else argv)
    run_dirs = [a.split("=", 1)[1] for a in args if a.startswith("run_dir=")]
    trust = [a.split("=", 1)[1] for a in args if a.startswith(f"{TRUST_FLAG}=")]
    sidecar = {
        key: [a.split("=", 1)[1] for a in args if a.startswith(f"{key}=")] for key in _SIDECAR_KEYS
    }
    own = ("run_dir=", f"{TRUST_FLAG}=", *(f"{key}=" for key in _SIDECAR_KEYS))
    overrides = [a for a in args if not a.startswith(own)]
    if len(run_dirs) != 1 or not run_dirs[0]:
        exit_with(ConfigError("run_dir", "is required once", hint="run_dir=outputs/DATE/TIME"))
    if any(value.lower() not in ("true", "false") for value in trust):
        exit_with(ConfigError(TRUST_FLAG, "must be true or false", value=trust[-1]))
    quiet_tensorflow()
    if sidecar["watch"] and sidecar["watch"][-1].lower() == "true":
        _watch(run_dirs[0], overrides, sidecar, trust=bool(trust) and trust[-1].lower() == "true")
        return
    try:
        metrics = evaluate_run(
            run_dirs[0], overrides, trust_run_dir=bool(trust) and trust[-1].lower() == "true"
        )
    except ConfigError as error:
        exit_with(error)
    for name, value in metrics.items():
        print(f"validation {name}: {value:.9g}", flush=True)
    print(json.dumps({"validation": metrics}), flush=True)


_SIDECAR_KEYS = ("watch", "poll_seconds", "timeout")


def _watch(
    run_dir: str, overrides: list[str], options: dict[str, list[str]], *, trust: bool
) -> None:
    """`watch=true`: the sidecar evaluator (`kdist.evaluation.sidecar.watch`)."""
    from kdist.evaluation.sidecar import watch

    try:
        poll = float(options["poll_seconds"][-1]) if options["poll_seconds"] else 5.0
        timeout = float(options["timeout"][-1]) if options["timeout"] else None
    except ValueError:
        exit_with(ConfigError("poll_seconds/timeout", "must be numbers of seconds"))
    try:
        records = watch(run_dir, overrides, trust_run_dir=trust, poll_seconds=poll, timeout=timeout)
    except ConfigError as error:
        exit_with(error)
    except LinkError as error:  # eval.csv made a link while the sidecar ran
        exit_with(ConfigError("run_dir", str(error), value=run_dir))
    print(f"[sidecar] evaluated {len(records)} checkpoint(s); the run has finished", flush=True)


if __name__ == "__main__":
    main()
