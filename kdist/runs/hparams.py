"""TensorBoard HParams sessions: one run's or one trial's values and final metrics.

One writer for both: a tuner trial (`kdist.tuning.tuner`, the search's experiment at
`trials/` beside it, `kdist.tuning.hparams`) and a `kdist.train` run, a multirun job among
them (`kdist.callbacks.run_hparams`). TensorBoard's HParams tab shows one row per session.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["hparam_value", "write_session"]


def hparam_value(value: Any) -> bool | int | float | str:
    """`value` as TensorBoard's HParams take it: a bool, number or string (else its text)."""
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
    objective: str | None = None,
) -> None:
    """Write one trial's or run's HParams session: its values and final metrics at `step`.

    Args:
        logdir: the trial's or run's TensorBoard folder.
        trial_id: the trial's id or the run's name (the session's group in TensorBoard).
        hparams: tuned or overridden key -> the value.
        metrics: metric name -> final value (non-finite values are skipped).
        step: the step the metrics belong to (epochs trained).
        started: the trial's start time (seconds since the epoch). Defaults to `None`: now.
        objective: the metric the run is judged by. Defaults to `None`. When given, the
            folder also declares the experiment (`hparams_config`): the keys, and the
            metrics with the objective first, so TensorBoard's HParams tab lists it first
            and shows metrics a session did not log as missing, not as absent columns.
    """
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp

    logdir.mkdir(parents=True, exist_ok=True)
    writer = tf.summary.create_file_writer(str(logdir))
    try:
        with writer.as_default():
            if objective is not None:
                names = [objective, *sorted(set(metrics) - {objective})]
                hp.hparams_config(
                    hparams=[hp.HParam(key) for key in hparams],
                    metrics=[hp.Metric(name) for name in names],
                    time_created_secs=int(started or time.time()),
                )
            hp.hparams(
                {key: hparam_value(value) for key, value in hparams.items()},
                trial_id=trial_id,
                start_time_secs=int(started or time.time()),
            )
            for name, value in metrics.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    tf.summary.scalar(name, float(value), step=step)
        writer.flush()
    finally:
        writer.close()
