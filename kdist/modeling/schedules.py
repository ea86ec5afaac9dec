"""Learning-rate schedules from the `optimizer` node: linear warm-up and cosine decay.

`optimizer.schedule: cosine` is Keras's `CosineDecay` (with its own linear warm-up);
a warm-up alone (`schedule: null`, `warmup_steps > 0`) is `WarmUp` around a constant.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from kdist.config.errors import ConfigError
from kdist.config.validate import LR_SCHEDULES as SCHEDULES

__all__ = ["SCHEDULES", "WarmUp", "build_schedule"]


@keras.saving.register_keras_serializable(package="kdist")
class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `learning_rate` over `warmup_steps`, then `learning_rate`.

    Registered with Keras so an optimizer using it saves and reloads with `model.keras`.

    Args:
        learning_rate: the rate after warm-up.
        warmup_steps: steps of the linear ramp; step `s < warmup_steps` uses
            `learning_rate * (s + 1) / warmup_steps`.
    """

    def __init__(self, learning_rate: float, warmup_steps: int):
        if learning_rate <= 0:
            raise ValueError(f"`learning_rate` ({learning_rate}) must be positive.")
        if warmup_steps < 1:
            raise ValueError(f"`warmup_steps` ({warmup_steps}) must be a positive integer.")
        self.learning_rate = float(learning_rate)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step: Any) -> Any:
        step = ops.cast(step, "float32")
        ramp = self.learning_rate * (step + 1.0) / float(self.warmup_steps)
        return ops.minimum(ramp, self.learning_rate)

    def get_config(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps}


def build_schedule(
    learning_rate: float,
    *,
    schedule: str | None = None,
    warmup_steps: int = 0,
    decay_steps: int | None = None,
    alpha: float = 0.0,
    total_steps: int | None = None,
) -> float | keras.optimizers.schedules.LearningRateSchedule:
    """The learning rate or schedule the optimizer gets.

    Args:
        learning_rate: the peak rate (after any replica scaling).
        schedule: `None` (constant after warm-up) or `"cosine"`. Defaults to `None`.
        warmup_steps: steps of linear warm-up from 0. Defaults to `0`.
        decay_steps: steps of cosine decay after warm-up. Defaults to `None`:
            `total_steps - warmup_steps`.
        alpha: the cosine's final rate as a fraction of `learning_rate`. Defaults to `0.0`.
        total_steps: optimizer steps of the run (`trainer.epochs` times steps per epoch),
            to derive `decay_steps`. Defaults to `None`.

    Returns:
        `learning_rate` itself, or a `LearningRateSchedule`.

    Raises:
        ConfigError: naming the `optimizer` key at fault.
    """
    if schedule not in SCHEDULES:
        raise ConfigError(
            "optimizer.schedule", "is not a valid choice", value=schedule, hint="use null or cosine"
        )
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ConfigError("optimizer.warmup_steps", "must be an integer >= 0", value=warmup_steps)
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError("optimizer.alpha", "must be in [0, 1]", value=alpha)
    if schedule is None:
        return WarmUp(learning_rate, warmup_steps) if warmup_steps else learning_rate
    if decay_steps is None:
        if total_steps is None:
            raise ConfigError(
                "optimizer.decay_steps",
                "is needed when the run's length is unknown",
                hint="set optimizer.decay_steps=N",
            )
        decay_steps = int(total_steps) - warmup_steps
        if decay_steps < 1:
            raise ConfigError(
                "optimizer.warmup_steps",
                f"leaves no step to decay: the run has {total_steps} steps",
                value=warmup_steps,
                hint=f"use fewer than {total_steps} warm-up steps",
            )
    elif decay_steps < 1:
        raise ConfigError(
            "optimizer.decay_steps", "must be a positive integer or null", value=decay_steps
        )
    if warmup_steps:
        return keras.optimizers.schedules.CosineDecay(
            initial_learning_rate=0.0,
            decay_steps=int(decay_steps),
            alpha=float(alpha),
            warmup_target=float(learning_rate),
            warmup_steps=warmup_steps,
        )
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=float(learning_rate), decay_steps=int(decay_steps), alpha=float(alpha)
    )
