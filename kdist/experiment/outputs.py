"""The files a run leaves in its run directory, besides what callbacks write while training.

`metrics.json` (the summary), `config.yaml` outside a Hydra app, `model.keras` and
`saved_model/` (unless the best-model callback wrote them), and `history.csv` trimmed when a
run resumes. Written by the chief only: callers pass the chief's output folder.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import keras
import numpy as np
from omegaconf import OmegaConf

from kdist.callbacks.best_model import save_model_files
from kdist.callbacks.factory import RunCallbacks
from kdist.cluster import chief
from kdist.engine.controller import FitResult
from kdist.engine.sharded import savable_model
from kdist.runs import layout
from kdist.runs.fileio import read_csv, write_csv_atomic, write_text_atomic

__all__ = ["summary", "trim_history", "write", "write_config"]

log = logging.getLogger(__name__)


def summary(
    result: FitResult,
    cfg: Any,
    *,
    steps: int,
    strategy_name: str,
    num_replicas: int,
    global_batch_size: int,
) -> dict[str, Any]:
    """The summary `metrics.json` holds: final metrics, steps, speed and the objective.

    Args:
        result: what the controller's `fit` returned.
        cfg: the train config (its objective).
        steps: optimizer updates applied (`optimizer.iterations`).
        strategy_name: the strategy's class name.
        num_replicas: replicas in sync.
        global_batch_size: examples per step over all replicas (the run's data plan's).
    """
    logs = result.final_logs
    batch = global_batch_size
    seconds = max(result.train_seconds, 1e-9)
    objective = cfg.get("objective") or {"name": "loss", "direction": "min"}
    return {
        "train": {k: _plain(v) for k, v in logs.items() if not k.startswith("val_")},
        "validation": {k[4:]: _plain(v) for k, v in logs.items() if k.startswith("val_")},
        "steps": steps,
        "epochs": result.run_epochs or result.epochs_run,  # the run's, not this session's
        "examples_per_sec": result.steps_run * batch / seconds,
        "strategy": strategy_name,
        "num_replicas": num_replicas,
        "global_batch_size": batch,
        "wall_seconds": result.train_seconds,
        "objective": {
            "name": str(objective["name"]),
            "direction": str(objective["direction"]),
            "value": logs.get(str(objective["name"])),
        },
    }


def _plain(value: Any) -> Any:
    """A log value for JSON: a metric with several values (`F1Score()`) as a list."""
    return value.tolist() if isinstance(value, np.ndarray) else value


def write_config(output_dir: Path, cfg: Any) -> None:
    """`config.yaml`, the resolved config, outside a Hydra app (which writes `.hydra/`).

    Written when the run is set up, so a run that fails still says how it was configured.
    """
    if not (output_dir / layout.HYDRA).exists():
        write_text_atomic(output_dir / layout.CONFIG, OmegaConf.to_yaml(cfg, resolve=True))


def write(
    output_dir: Path,
    run_dir: Path,
    callbacks: RunCallbacks,
    *,
    metrics: dict[str, Any],
    cfg: Any,
    model: keras.Model,
) -> None:
    """Write `metrics.json` and the model into `output_dir`, and log a line.

    Args:
        output_dir: the run directory on the chief, a scratch folder elsewhere (removed).
        run_dir: the run directory.
        metrics: the summary (see `summary`); the best model's epoch is added.
        cfg: the train config.
        model: the trained model (exported unless the best-model callback did).
        callbacks: the run's callbacks: the best-model export, if any, and `curves.png`,
            whose last drawing starts here, in the background, after everything else.
    """
    best_model = callbacks.best_model
    if best_model is not None and best_model.best is not None:
        metrics["best_model"] = {
            "monitor": best_model.monitor,
            "value": best_model.best,
            "epoch": (best_model.best_epoch or 0) + 1,
        }
    write_text_atomic(output_dir / layout.METRICS, json.dumps(metrics, indent=2) + "\n")
    if "best_model" not in metrics and cfg.callbacks.save_model:
        # model.keras to evaluate or fine-tune, saved_model/ (serving_default) to serve.
        saved_model = bool(cfg.callbacks.get("saved_model", True))
        save_model_files(savable_model(model), output_dir, saved_model=saved_model)
    chief.cleanup_dir(output_dir, run_dir)
    if callbacks.curves is not None:
        callbacks.curves.draw_final()
    shown = (
        ", ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
            for k, v in metrics["validation"].items()
        )
        or "none"
    )
    log.info(
        "trained %d steps in %.1f s (whole run %.0f examples/s, incl. first call and validation); "
        "validation: %s",
        metrics["steps"],
        metrics["wall_seconds"],
        metrics["examples_per_sec"],
        shown,
    )


def _epoch(row: dict[str, str]) -> float:
    try:
        return float(row.get("epoch") or "")
    except ValueError:
        return -1.0  # a damaged cell (read as U+FFFD): the row is kept as it is


def trim_history(output_dir: Path, epoch: int) -> None:
    """Drop `history.csv` rows of epochs from `epoch` on: the resumed run redoes them.

    A run stopped inside an epoch still logs that partial epoch; its row would otherwise
    appear twice.
    """
    path = output_dir / layout.HISTORY
    rows = read_csv(path) if path.exists() else []
    kept = [row for row in rows if _epoch(row) < epoch]
    if len(kept) != len(rows):
        write_csv_atomic(path, kept, list(rows[0]))
