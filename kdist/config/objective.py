"""The run's objective: its name, its direction, what `auto` picks, the check against the logs.

One home for everything `objective.name` / `objective.direction` mean, without Keras:

- before a model exists, `resolve_objective` turns `auto` into what the config's metrics
  will log (`val_accuracy` or `val_loss`), for sweeps and the tuner;
- once the model is built, `check_objective` checks the name against what the model logs
  (and picks from a user-compiled model's own metrics), with the metrics' own directions
  (`metric_directions`); `check_monitors` does the same for the callbacks' monitors;
- `direction_of` guesses `min`/`max` from a name; `monitor_mode` is a monitor's `mode`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kdist.compat.keras_private import flat_metrics, metric_direction
from kdist.config.compile_rules import default_metrics, has_accuracy, plain
from kdist.config.errors import ConfigError

__all__ = [
    "check_monitors",
    "check_objective",
    "direction_of",
    "metric_directions",
    "monitor_mode",
    "resolve_objective",
]

log = logging.getLogger(__name__)


def resolve_objective(cfg: Any) -> None:
    """Replace `objective.name`/`direction` `auto` by what the run logs (in place).

    `auto` is `val_accuracy` when `trainer.metrics` has a metric logged as `accuracy`,
    else `val_loss`; without validation the `val_` prefix is dropped. A direction of
    `auto` is `max` for accuracy-like names and `min` for losses and errors.
    """
    objective = cfg.get("objective")
    if objective is None or "trainer" not in cfg:
        return
    name = str(objective.get("name", "auto"))
    if name == "auto":
        metrics = cfg.trainer.get("metrics")
        if metrics is None:
            metrics = default_metrics(plain(cfg.trainer.get("loss")))
        base = "accuracy" if has_accuracy(metrics) else "loss"
        validates = bool(cfg.trainer.get("validation", True))
        name = f"val_{base}" if validates else base
        objective.name = name
    if str(objective.get("direction", "auto")) == "auto":
        objective.direction = direction_of(name)


# Words in a metric's name that mean lower is better (losses, errors, divergences).
_LOWER_IS_BETTER = (
    "loss",
    "error",
    "mae",
    "mse",
    "mape",
    "msle",
    "crossentropy",
    "hinge",
    "divergence",
    "poisson",
    "logcosh",
)


def direction_of(name: str) -> str:
    """`min` for a loss or an error (by its name, `val_` prefix or not), else `max`."""
    stem = name.removeprefix("val_").lower()
    return "min" if any(word in stem for word in _LOWER_IS_BETTER) else "max"


def metric_directions(model: Any) -> dict[str, str]:
    """`min`/`max` of each metric `model` logs, from the metrics' own `_direction`."""
    directions = {"loss": "min"}
    if model is None:
        return directions
    pending = list(model.metrics)
    while pending:
        metric = pending.pop()
        # CompileMetrics holds the compiled metrics (per output) inside it.
        pending.extend(flat_metrics(metric))
        direction = metric_direction(metric)
        if direction is not None:
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


def monitor_mode(monitor: str, mode: str, directions: Mapping[str, str]) -> str:
    """`mode` for a monitored metric: as configured, or `min`/`max` from the metric itself.

    Keras infers it from compiled metrics, which kdist's engine does not use.

    Args:
        monitor: the monitored name (`val_` prefix or not).
        mode: the configured mode: `min`, `max` or `auto`.
        directions: metric name -> `min`/`max` (`metric_directions`).

    Returns:
        `min` or `max`.
    """
    if mode != "auto":
        return mode
    name = monitor.removeprefix("val_")
    if name in directions:
        return directions[name]
    return direction_of(name)
