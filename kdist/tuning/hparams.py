"""TensorBoard HParams for a search: one session per trial, the experiment at the root.

Layout (`tensorboard --logdir <run_dir>/trials`, then the HParams tab):

- `trials/`: the experiment (every tuned key with its domain, and the metrics);
- `trials/trial_<id>/tensorboard/`: the trial's session (its values, its final metrics),
  beside the `train/` and `validation/` curves the trial's TensorBoard callback writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kdist.runs.hparams import hparam_value, write_session
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
        hparams.append(hp.HParam(key, hp.Discrete(sorted({hparam_value(v) for v in values}))))
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
