"""Build the Keras optimizer from the `optimizer` node, with learning-rate scaling."""

from __future__ import annotations

import logging
import math
from typing import Any

import keras
from omegaconf import OmegaConf

from kdist.config.constants import LAZY_OPTIMIZERS
from kdist.config.errors import ConfigError
from kdist.config.targets import instantiate
from kdist.config.validate import OPTIMIZER_KDIST_KEYS
from kdist.modeling.lazy_optimizers import LazyAdagrad, LazyAdam, SparseLossScaleOptimizer
from kdist.modeling.schedules import build_schedule

__all__ = ["build", "scaled_learning_rate"]

log = logging.getLogger(__name__)


def scaled_learning_rate(learning_rate: float, rule: str, num_replicas: int) -> float:
    """`learning_rate` scaled with the replica count: `none`, `linear` or `sqrt`."""
    if rule == "linear":
        return learning_rate * num_replicas
    if rule == "sqrt":
        return learning_rate * math.sqrt(num_replicas)
    if rule == "none":
        return learning_rate
    raise ValueError(f"`lr_scaling` ({rule!r}) must be one of none, linear, sqrt.")


def build(
    optimizer_cfg: Any,
    *,
    num_replicas: int = 1,
    mixed_precision: str | None = None,
    total_steps: int | None = None,
) -> keras.optimizers.Optimizer:
    """Build the optimizer; call it inside `strategy.scope()`.

    With `optimizer.sparse_updates`, Adam and Adagrad are built in their row-sparse
    form (`kdist.modeling.lazy_optimizers`): embedding tables update only the looked-up rows.

    The (scaled) learning rate is the peak of the schedule `optimizer.schedule`,
    `warmup_steps`, `decay_steps` and `alpha` describe (see `kdist.modeling.schedules`).

    Args:
        optimizer_cfg: the `optimizer` node (a `_partial_` `_target_` to a Keras optimizer).
        num_replicas: replicas in sync, for `lr_scaling`. Defaults to `1`.
        mixed_precision: the runtime's policy; `mixed_float16` wraps the optimizer in a
            `LossScaleOptimizer`. Defaults to `None`.
        total_steps: optimizer steps of the run, from which a cosine schedule's
            `decay_steps` is derived when not set. Defaults to `None`.

    Returns:
        The Keras optimizer.

    Raises:
        ConfigError: `optimizer.sparse_updates` for an optimizer with no row-sparse form.
    """
    node = OmegaConf.to_container(optimizer_cfg, resolve=True)
    assert isinstance(node, dict)
    rule = str(node.get("lr_scaling", "none"))
    if node.get("sparse_updates"):
        lazy = LAZY_OPTIMIZERS.get(str(node["_target_"]))
        if lazy is None:
            raise ConfigError(
                "optimizer.sparse_updates",
                f"has no row-sparse form for {node['_target_']}",
                value=True,
                hint="use optimizer=adam or optimizer=adagrad, or sparse_updates=false",
            )
        node["_target_"] = lazy
    schedule_keys = {k: node.get(k) for k in ("schedule", "warmup_steps", "decay_steps", "alpha")}
    for key in OPTIMIZER_KDIST_KEYS:
        node.pop(key, None)
    learning_rate = scaled_learning_rate(float(node.pop("learning_rate")), rule, num_replicas)
    if rule != "none":
        log.info(
            "learning rate %g scaled (%s, %d replicas) to %g",
            optimizer_cfg.learning_rate,
            rule,
            num_replicas,
            learning_rate,
        )
    node["_partial_"] = True
    factory = instantiate(node)
    optimizer = factory(
        learning_rate=build_schedule(
            learning_rate,
            schedule=schedule_keys["schedule"],
            warmup_steps=int(schedule_keys["warmup_steps"] or 0),
            decay_steps=schedule_keys["decay_steps"],
            alpha=float(schedule_keys["alpha"] or 0.0),
            total_steps=total_steps,
        )
    )
    if mixed_precision == "mixed_float16":
        if isinstance(optimizer, (LazyAdam, LazyAdagrad)):
            # Keras's wrapper would turn the embeddings' sparse gradients dense.
            optimizer = SparseLossScaleOptimizer(optimizer)
        else:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
