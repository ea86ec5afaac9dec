"""TensorBoard HParams for a search: one session per trial, the experiment at the root.

Layout (`tensorboard --logdir <run_dir>/trials`, then the HParams tab):

- `trials/`: the experiment (every tuned key with its domain, and the metrics);
- `trials/trial_<id>/tensorboard/`: the trial's session (its values, its final metrics),
  beside the `train/` and `validation/` curves the trial's TensorBoard callback writes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kdist.tuning.space import Space

__all__ = ["write_experiment", "write_session"]


def _domain(dimension: Any) -> Any:
    from tensorboard.plugins.hparams import api as hp

    if dimension.kind == "choice":
        return hp.Discrete(list(dimension.values))
    if dimension.kind == "int":
        return hp.IntInterval(int(dimension.low), int(dimension.high))
    if dimension.kind == "float":
        return hp.RealInterval(float(dimension.low), float(dimension.high))
    return hp.Discrete([dimension.values[0]])


def _scalar(value: Any) -> bool | int | float | str:
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def write_session(
    logdir: Path,
    *,
    trial_id: str,
    hparams: Mapping[str, Any],
    metrics: Mapping[str, Any],
    step: int,
    started: float | None = None,
) -> None:
    """Write one trial's HParams session: its values and final metrics at `step`.

    Args:
        logdir: the trial's TensorBoard folder.
        trial_id: the trial's id (the session's name in TensorBoard).
        hparams: tuned key -> the trial's value.
        metrics: metric name -> final value (non-finite values are skipped).
        step: the step the metrics belong to (epochs trained).
        started: the trial's start time (seconds since the epoch). Defaults to `None`: now.
    """
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp

    logdir.mkdir(parents=True, exist_ok=True)
    writer = tf.summary.create_file_writer(str(logdir))
    try:
        with writer.as_default():
            hp.hparams(
                {key: _scalar(value) for key, value in hparams.items()},
                trial_id=trial_id,
                start_time_secs=int(started or time.time()),
            )
            for name, value in metrics.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    tf.summary.scalar(name, float(value), step=step)
        writer.flush()
    finally:
        writer.close()


def write_experiment(
    logdir: Path,
    *,
    space: Space,
    metrics: Iterable[str],
    extra: Mapping[str, Sequence[Any]] | None = None,
) -> None:
    """Write the experiment summary: every tuned key's domain and the metric names.

    Args:
        logdir: the search's TensorBoard root (`<run_dir>/trials`); earlier summaries
            written here are replaced.
        space: the search space.
        metrics: the metric names the sessions record (e.g. `val_accuracy`).
        extra: more hyperparameters shown with their values' domain, e.g.
            `{"trainer.epochs": [1, 3, 9]}` under Hyperband. Defaults to `None`.
    """
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp

    logdir.mkdir(parents=True, exist_ok=True)
    for old in logdir.glob("events.out.tfevents.*"):
        old.unlink()
    hparams = [hp.HParam(d.key, _domain(d)) for d in space]
    for key, values in (extra or {}).items():
        hparams.append(hp.HParam(key, hp.Discrete(sorted({_scalar(v) for v in values}))))
    writer = tf.summary.create_file_writer(str(logdir))
    try:
        with writer.as_default():
            hp.hparams_config(
                hparams=hparams,
                metrics=[hp.Metric(name, display_name=name) for name in sorted(set(metrics))],
            )
        writer.flush()
    finally:
        writer.close()
