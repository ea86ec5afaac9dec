"""The run's objective (`objective.name`, `objective.direction`) and its metrics' directions."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import keras

from kdist.compiling import direction_of
from kdist.config.errors import ConfigError

__all__ = ["check_objective", "metric_directions"]

log = logging.getLogger(__name__)


def metric_directions(model: keras.Model | None) -> dict[str, str]:
    """`min`/`max` of each metric `model` logs, from the metrics' own `_direction`."""
    directions = {"loss": "min"}
    if model is None:
        return directions
    pending = list(model.metrics)
    while pending:
        metric = pending.pop()
        # CompileMetrics holds the compiled metrics (per output) inside it.
        pending.extend(getattr(metric, "_flat_metrics", None) or [])
        direction = getattr(metric, "_direction", None)
        if direction in ("up", "down"):
            directions[metric.name] = "max" if direction == "up" else "min"
    return directions


def check_objective(
    objective: Any, logged: Sequence[str], *, validates: bool, auto: bool, warn: bool = True
) -> None:
    """`objective.name` must be something the run logs; `auto` picks it from `logged`.

    Args:
        objective: the `objective` config node (or `None`: nothing to check). An `auto`
            name is replaced in place.
        logged: the metric names the run logs (without `val_`).
        validates: whether the run has validation data.
        auto: the configured name was `auto`.
        warn: log a warning for a validation objective without validation. Defaults to
            `True`.

    Raises:
        ConfigError: naming `objective.name` when the run does not log it.
    """
    if objective is None:
        return
    if auto and objective.name.removeprefix("val_") not in logged:
        # A model compiled by the user logs its own metrics: pick from those.
        name = "accuracy" if "accuracy" in logged else "loss"
        objective.name = f"val_{name}" if validates else name
        objective.direction = direction_of(name)
    if objective.name not in [*logged, *(f"val_{name}" for name in logged)]:
        raise ConfigError(
            "objective.name",
            "is not a metric of this run",
            value=objective.name,
            hint=f"use one of: {', '.join(logged)} (val_<name> for validation)",
        )
    if warn and str(objective.name).startswith("val_") and not validates:
        # Training still makes sense; sweeps and the tuner get no value (the tuner stops).
        log.warning("objective %s needs validation, which this run has not", objective.name)
