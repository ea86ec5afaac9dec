"""The run's objective (`objective.name`, `objective.direction`) and its metrics' directions."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import keras

from kdist.config.errors import ConfigError
from kdist.modeling.compiling import direction_of

__all__ = ["check_monitors", "check_objective", "metric_directions"]

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


def _auto_name(logged: Sequence[str]) -> str:
    """What `objective.name: auto` means for a model that logs `logged`.

    `accuracy` when the model logs it (kdist's classifiers), else `loss`, else the
    model's first metric (a VAE's `total_loss`, a GAN's `d_loss`).
    """
    for name in ("accuracy", "loss"):
        if name in logged:
            return name
    return logged[0]


def _direction(name: str, directions: Mapping[str, str], *, strict: bool) -> str:
    """`min`/`max` of `name`: the metric's own, else by its name.

    With `strict` (a name `auto` picked from the model's own metrics) only a name ending
    in `loss` is taken to be minimised; any other must be told.

    Raises:
        ConfigError: naming `objective.direction` when `strict` and nothing tells.
    """
    stem = name.removeprefix("val_")
    if stem in directions:
        return directions[stem]
    if not strict:
        return direction_of(stem)
    if stem.endswith("loss"):
        return "min"
    raise ConfigError(
        "objective.direction",
        f"is auto, and the objective {name} (the model's first metric) does not say whether "
        "higher or lower is better",
        value="auto",
        hint="set objective.direction=max or min (or objective.name to one of its losses)",
    )


def check_objective(
    objective: Any,
    logged: Sequence[str],
    *,
    validates: bool,
    auto: bool,
    direction_auto: bool = False,
    directions: Mapping[str, str] | None = None,
    warn: bool = True,
) -> None:
    """`objective.name` must be something the run logs; `auto` picks it from `logged`.

    Args:
        objective: the `objective` config node (or `None`: nothing to check). An `auto`
            name (and direction) is replaced in place.
        logged: the metric names the model logs (without `val_`), in its order.
        validates: whether the run has validation data.
        auto: the configured name was `auto`.
        direction_auto: the configured direction was `auto`: it follows the name.
            Defaults to `False` (the direction is kept).
        directions: metric name -> `min`/`max`, from the metrics themselves
            (`metric_directions`). Defaults to `None`.
        warn: log a warning for a validation objective without validation. Defaults to
            `True`.

    Raises:
        ConfigError: naming `objective.name` when the run does not log it (listing what
            it logs), or `objective.direction` when `auto` cannot tell it.
    """
    if objective is None or not logged:
        return
    directions = directions or {}
    if auto and objective.name.removeprefix("val_") not in logged:
        # A model compiled by the user logs its own metrics: pick from those.
        name = _auto_name(logged)
        objective.name = f"val_{name}" if validates else name
        if direction_auto:
            objective.direction = _direction(
                name, directions, strict=name not in ("accuracy", "loss")
            )
    elif direction_auto:
        objective.direction = _direction(str(objective.name), directions, strict=False)
    if objective.name not in [*logged, *(f"val_{name}" for name in logged)]:
        raise ConfigError(
            "objective.name",
            "is not a metric of this run",
            value=objective.name,
            hint=f"the model logs: {', '.join(logged)} (val_<name> for validation)",
        )
    if warn and str(objective.name).startswith("val_") and not validates:
        # Training still makes sense; sweeps and the tuner get no value (the tuner stops).
        log.warning("objective %s needs validation, which this run has not", objective.name)


def check_monitors(cfg: Any, logged: Sequence[str]) -> None:
    """The metrics `callbacks.*.monitor` name must be ones the model logs.

    Raises:
        ConfigError: naming the monitor's key, listing what the model logs.
    """
    callbacks = cfg.get("callbacks")
    if callbacks is None or not logged:
        return
    names = [*logged, *(f"val_{name}" for name in logged)]
    monitors = {"callbacks.best_model.monitor": callbacks.best_model.get("monitor")}
    if callbacks.early_stopping.get("enabled"):
        monitors["callbacks.early_stopping.monitor"] = callbacks.early_stopping.get("monitor")
    for key, monitor in monitors.items():
        if monitor and str(monitor) not in names:
            raise ConfigError(
                key,
                "is not a metric of this run",
                value=str(monitor),
                hint=f"the model logs: {', '.join(logged)} (val_<name> for validation)",
            )
