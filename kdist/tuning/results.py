"""What a search leaves for its user: per-trial records, `trials.csv` and `best.yaml`.

- `trials/trial_<id>/result.json`: written by the process that ran the trial (status,
  reason, tuned values, overrides, final metrics, times);
- `trials.csv`: one row per trial, rewritten by the chief after every trial;
- `best.yaml`: the best completed trial's overrides and the command reproducing it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kdist.runs.fileio import write_csv_atomic, write_text_atomic
from kdist.runs.sweep import plot_table
from kdist.tuning.oracles import TrialStatus, reason
from kdist.tuning.plan import TrialPlan

__all__ = ["best_trial", "read_record", "trial_rows", "write_best", "write_record", "write_tables"]

RECORD = "result.json"


def write_record(trial_dir: Path, record: Mapping[str, Any]) -> None:
    """Write a trial's `result.json` atomically."""
    write_text_atomic(trial_dir / RECORD, json.dumps(dict(record), indent=2, default=str) + "\n")


def read_record(trial_dir: Path) -> dict[str, Any]:
    """A trial's `result.json`, or `{}` when it has none (yet)."""
    try:
        return dict(json.loads((trial_dir / RECORD).read_text()))
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
    overrides = plan.trial_overrides(values)
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
