"""The runner for a strategy: `ParameterServerRunner` for parameter servers, else standard."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from kdist.config.sync import SyncSettings
from kdist.engine.ps_runner import ParameterServerRunner
from kdist.engine.runner import Runner
from kdist.engine.standard_runner import StandardRunner
from kdist.engine.sync.runner import LocalSGDRunner

__all__ = ["make_runner"]


def make_runner(
    strategy: tf.distribute.Strategy,
    *,
    steps_per_schedule: int,
    sync: SyncSettings | None = None,
    **kwargs: Any,
) -> Runner:
    """The runner that trains under `strategy`.

    Args:
        strategy: the run's strategy.
        steps_per_schedule: steps in one function a parameter-server chief schedules on a
            worker (`strategy.steps_per_schedule`); unused by other strategies.
        sync: `strategy.sync`; a local mode (`local_sgd`, `diloco`) makes a
            `LocalSGDRunner`. Defaults to `None` (`every_step`).
        **kwargs: `StepRunner`'s arguments (model, data, batch, steps per execution, ...).

    Raises:
        ValueError: naming the argument, as the runners do.
    """
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        # The chief schedules K-step functions on the workers.
        return ParameterServerRunner(
            strategy=strategy, steps_per_schedule=steps_per_schedule, **kwargs
        )
    if sync is not None and sync.local:
        return LocalSGDRunner(strategy=strategy, sync=sync, **kwargs)
    return StandardRunner(strategy=strategy, **kwargs)
