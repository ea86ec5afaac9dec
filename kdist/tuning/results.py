"""What a search leaves for its user: per-trial records, `trials.csv` and `best.yaml`.

- `trials/trial_<id>/result.json`: written by the process that ran the trial (status,
  reason, tuned values, overrides, final metrics, times);
- `trials.csv`: one row per trial, rewritten by the chief after every trial;
- `best.yaml`: the best completed trial's overrides and the command reproducing it.

`load_best` reads a search's `best.yaml` back as a composed training config, every
`_target_` of which has passed kdist's trust check (`kdist.config.trust`): a `best.yaml`
is a file in a folder, and anyone who can write the folder can plant a `_target_` in it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig

from kdist.config.errors import ConfigError
from kdist.config.yaml_limits import load_yaml
from kdist.runs.fileio import read_text_limited, write_csv_atomic, write_text_atomic
from kdist.runs.sweep import plot_table
from kdist.tuning import search_settings
from kdist.tuning.oracles import TrialStatus, reason
from kdist.tuning.plan import TrialPlan

__all__ = [
    "BEST",
    "best_trial",
    "load_best",
    "read_record",
    "trial_rows",
    "write_best",
    "write_record",
    "write_tables",
]

RECORD = "result.json"
BEST = "best.yaml"


def write_record(trial_dir: Path, record: Mapping[str, Any]) -> None:
    """Write a trial's `result.json` atomically."""
    write_text_atomic(trial_dir / RECORD, json.dumps(dict(record), indent=2, default=str) + "\n")


def read_record(trial_dir: Path) -> dict[str, Any]:
    """A trial's `result.json`, or `{}` when it has none (yet)."""
    try:
        return dict(json.loads(read_text_limited(trial_dir / RECORD)))  # bounded
    except (OSError, ValueError):
        return {}


def _oracle_metrics(trial: Any) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for name, history in trial.metrics.metrics.items():
        value = history.get_last_value()
        if value is not None:
            metrics[name] = float(value)
    return metrics


def trial_rows(oracle: Any, *, plan: TrialPlan, trials_dir: Path) -> list[dict[str, Any]]:
    """One row per trial the oracle knows, in trial order.

    Status and score come from the oracle; the reason, times and metrics from the
    trial's `result.json` when it is readable (the oracle's copy otherwise).
    """
    rows = []
    objective = str(oracle.objective.name)
    for trial_id in sorted(oracle.trials):
        trial = oracle.trials[trial_id]
        folder = trials_dir / f"trial_{trial_id}"
        record = read_record(folder)
        values = trial.hyperparameters.values
        metrics = record.get("metrics") or _oracle_metrics(trial)
        status = trial.status
        row: dict[str, Any] = {
            "trial_id": trial_id,
            "status": status,
            "tuner_id": oracle.trial_tuners.get(trial_id) or record.get("tuner_id", ""),
            # As in a multirun's summary.csv: the score, and the metric it is.
            "objective": trial.score if status == TrialStatus.COMPLETED else None,
            "objective_name": objective,
        }
        row.update(plan.hparams(values))
        row.update(metrics)
        row["epochs"] = record.get("epochs")
        row["seconds"] = record.get("seconds")
        failed = status in (TrialStatus.FAILED, TrialStatus.INVALID)
        row["reason"] = (record.get("reason") or reason(trial.message)) if failed else ""
        row["run_dir"] = str(folder.relative_to(trials_dir.parent))
        rows.append(row)
    return rows


def best_trial(oracle: Any) -> Any | None:
    """The best completed trial, or `None` when no trial has completed."""
    for trial in oracle.get_best_trials(1):
        if trial.status == TrialStatus.COMPLETED and trial.score is not None:
            return trial
    return None


def write_best(path: Path, oracle: Any, *, plan: TrialPlan, run_dir: Path) -> dict[str, Any] | None:
    """Write `best.yaml` for the best completed trial; return its content (or `None`)."""
    trial = best_trial(oracle)
    if trial is None:
        return None
    values = trial.hyperparameters.values
    # A `HyperModel.fit`'s arguments that are config keys (`kdist.tuning.fit_override`).
    fit = read_record(run_dir / "trials" / f"trial_{trial.trial_id}").get("fit") or {}
    overrides = plan.trial_overrides(values, fit=fit.get("overrides") or ())
    command = plan.command(overrides)
    content: dict[str, Any] = {
        "trial_id": trial.trial_id,
        "objective": {
            "name": str(oracle.objective.name),
            "direction": str(oracle.objective.direction),
            "value": float(trial.score),
        },
        "config_name": plan.config_name,
        "config_dir": plan.config_dir,
        "overrides": overrides,
        "hyperparameters": {**plan.space.decode(values), **_epochs(plan, values)},
        # What `build_model(hp)` reads: `hp.values` for keras-tuner's own code.
        **({"hp": plan.space.hp_values(values)} if plan.space.hypermodel is not None else {}),
        "command": command,
        "run_dir": str(run_dir / "trials" / f"trial_{trial.trial_id}"),
    }
    if plan.space.fit_names:
        # What `HyperModel.fit` gave `model.fit` that no config key says (data in hand,
        # ...): the command trains the best trial without it.
        content["fit"] = {
            "hp": sorted(plan.space.fit_names),
            "overrides": list(fit.get("overrides") or []),
            "not_config_keys": list(fit.get("not_config_keys") or []),
        }
    header = f"# The best trial of the search in {run_dir}.\n# Reproduce it with:\n#   {command}\n"
    write_text_atomic(path, header + yaml.safe_dump(content, sort_keys=False, width=1000))
    return content


def _epochs(plan: TrialPlan, values: Mapping[str, Any]) -> dict[str, Any]:
    shown = plan.hparams(values)
    return {"trainer.epochs": shown["trainer.epochs"]} if "trainer.epochs" in shown else {}


def _columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    tail = ("epochs", "seconds", "reason", "run_dir")
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(k for k in row if k not in tail))
    seen.update(dict.fromkeys(tail))
    return list(seen)


def write_tables(oracle: Any, *, plan: TrialPlan, run_dir: Path) -> list[dict[str, Any]]:
    """Rewrite `trials.csv` and `best.yaml` in `run_dir` from the oracle's trials."""
    rows = trial_rows(oracle, plan=plan, trials_dir=run_dir / "trials")
    write_csv_atomic(run_dir / "trials.csv", rows, _columns(rows))
    direction = str(getattr(oracle.objective, "direction", "") or "") or None
    plot_table(run_dir / "trials.csv", direction=direction)
    write_best(run_dir / "best.yaml", oracle, plan=plan, run_dir=run_dir)
    return rows


# `best.yaml` is a small file; a bigger one is not kdist's.
_MAX_BEST_BYTES = 1 << 20
# An interpolation through a resolver (`${oc.decode:...}`, `${oc.env:...}`): it computes
# a value, or builds a node, when the config is resolved.
_RESOLVER_CALL = re.compile(r"\$\{\s*[\w.\-]+\s*:")


def _best_file(search_dir: str | os.PathLike[str], key: str) -> dict[str, Any]:
    path = Path(search_dir)
    path = path if path.name == BEST and not path.is_dir() else path / BEST
    if path.is_symlink():
        raise ConfigError(key, f"holds a symbolic link at {BEST}", value=str(path))
    try:
        size = path.stat().st_size
    except OSError:
        raise ConfigError(
            key, f"holds no {BEST} (no trial of the search has completed)", value=str(path)
        ) from None
    if size > _MAX_BEST_BYTES:
        raise ConfigError(key, f"holds a {BEST} of {size} bytes, not a search's", value=str(path))
    try:
        content = load_yaml(path, key=key)  # within kdist's size and alias limits
    except (OSError, UnicodeDecodeError) as error:
        text = " ".join(str(error).split())
        raise ConfigError(
            key, f"holds a {BEST} that does not read: {text}", value=str(path)
        ) from None
    if not isinstance(content, dict) or not isinstance(content.get("overrides"), list):
        raise ConfigError(key, f"holds a {BEST} without its list of overrides", value=str(path))
    return content


def _check_config_dir(search_dir: Path, config_dir: Any, *, key: str) -> None:
    """`best.yaml`'s `config_dir`: the folder the search recorded when it started
    (`keras_tuner/search.yaml`), or one inside the search folder; else one line."""
    if config_dir is None:
        return
    folder = (
        search_dir.parent if search_dir.name == BEST and not search_dir.is_dir() else search_dir
    )
    recorded, expected = search_settings.recorded_config_dir(folder, key=key)
    if recorded and expected is not None and str(config_dir) == expected:
        return
    real, root = os.path.realpath(str(config_dir)), os.path.realpath(folder)
    if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
        return
    said = f"it recorded {expected}" if recorded and expected else "it recorded none"
    raise ConfigError(
        "config_dir",
        f"in {folder}/{BEST} is not the config folder the search started with ({said}) "
        "nor a folder inside the search's",
        value=str(config_dir),
        hint=f"pass trust=True if you trust whoever wrote {folder}",
    )


def load_best(
    search_dir: str | os.PathLike[str],
    *,
    overrides: Sequence[str] = (),
    exempt: Sequence[str] = (),
    trust: bool = False,
) -> DictConfig:
    """The best trial of a search as a training config, checked before anything runs it.

    Reads `<search_dir>/best.yaml`, composes its overrides (with its `config_name` and
    `config_dir`) and `overrides`, and checks every `_target_` of the composed config with
    kdist's trust check (`kdist.config.trust.check_trusted_targets`), as `kdist.evaluate`
    checks a run folder's config: a `best.yaml` someone else could write cannot make
    `kdist.Experiment` run code of theirs, nor make a writer (`Curves(path=...)`, ...)
    write outside the run folder you give with `run_dir=` (none given: no path argument
    is accepted). Interpolations through a resolver (`${oc.decode:...}`), `run_dir` and
    `hydra.*` in its overrides are refused too, and its `config_dir` must be the folder
    the search recorded when it started (`keras_tuner/search.yaml`) or inside the search
    folder.

    Args:
        search_dir: the search's run folder (or its `best.yaml`).
        overrides: more overrides after the best trial's, e.g. `["run_dir=outputs/best"]`.
            They are yours: trusted. Defaults to `()`.
        exempt: dotted keys whose `_target_` you wrote yourself, e.g. `["model"]` for a
            search over your own `model._target_=my.build_model`. Defaults to `()`.
        trust: skip the trust check, for a folder only you could have written.
            Defaults to `False`.

    Returns:
        The composed config: `kdist.Experiment(load_best(dir))` trains the best trial again.

    Raises:
        ConfigError: naming `search_dir` for a missing or unreadable `best.yaml`; naming
            the key whose `_target_` is not trusted (or the override through a resolver).

    Example:

    ```python
    cfg = kdist.tune.best_config("outputs/2026-11-21/10-00-00", overrides=["run_dir=outputs/best"])
    exp = kdist.Experiment(cfg)
    exp.fit()
    ```
    """
    from kdist.config.compose import compose, format_hydra_error
    from kdist.config.trust import check_trusted_targets

    key = "search_dir"
    content = _best_file(search_dir, key)
    where = str(Path(search_dir))
    best = [str(o) for o in content["overrides"]]
    config_name = str(content.get("config_name") or "train")
    config_dir = content.get("config_dir")
    if not trust:
        _check_config_dir(Path(search_dir), config_dir, key=key)
        for override in best:
            name = override.split("=", 1)[0].lstrip("~+")
            if name in ("run_dir", "hydra") or name.startswith(("hydra.", "hydra/")):
                raise ConfigError(
                    name,
                    f"in {where}/{BEST} says where the run writes, which only you choose",
                    value=override,
                    hint="pass overrides=['run_dir=...'] yourself",
                )
            if _RESOLVER_CALL.search(override):
                raise ConfigError(
                    override.split("=", 1)[0].lstrip("~+"),
                    f"in {where}/{BEST} is an interpolation through a resolver, which "
                    "reading a search back does not resolve",
                    value=override,
                    hint=f"pass trust=True if you trust whoever wrote {where}",
                )
    try:
        cfg = compose([*best, *overrides], config_name=config_name, config_dir=config_dir)
    except ConfigError:
        raise
    except Exception as error:  # Hydra and OmegaConf raise many types
        raise ConfigError(
            key, f"{BEST}'s overrides do not compose: {format_hydra_error(error)}", value=where
        ) from None
    if not trust:
        mine = {o.split("=", 1)[0].lstrip("~+") for o in overrides if "=" in o}
        try:
            # A writer's path must stay in the run folder you give (`run_dir=`).
            check_trusted_targets(
                cfg,
                source=f"{where}/{BEST}",
                exempt=tuple(sorted({*exempt, *mine})),
                run_dir=cfg.get("run_dir"),
            )
        except ConfigError as error:
            raise ConfigError(
                error.key,
                error.problem,
                value=error.value,
                hint=f"pass trust=True if you trust whoever wrote {where} (or exempt=[...] "
                "the keys whose targets you wrote yourself)",
            ) from None
    return cfg
