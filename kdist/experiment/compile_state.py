"""What the compiled model says about its step, read at every `fit` (issue 42).

Keras's `make_train_function` reads the model's `steps_per_execution`, `jit_compile`
and `run_eagerly`, and Keras's `compile` drops the cached `train_function`. kdist reads
the same: a model the user compiled trains with its own settings (the config's
`trainer.steps_per_execution` and `runtime.jit_compile` are the defaults of the models
kdist compiles), and a recompile (`CompileWatch`) rebuilds kdist's step.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf

from kdist.compat.keras_private import compile_config
from kdist.config.errors import ConfigError

__all__ = [
    "CompileWatch",
    "StepSettings",
    "check_optimizer",
    "eager_if",
    "step_settings",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepSettings:
    """How kdist's step runs: Keras's `compile(steps_per_execution, jit_compile,
    run_eagerly)`.

    Attributes:
        steps_per_execution: steps per call of the step function; batch hooks run once a
            call, as in Keras's `fit`.
        jit_compile: XLA for the step's forward and backward pass (`kdist.engine.step`).
        run_eagerly: the step runs eagerly (`tf.config.run_functions_eagerly`).
    """

    steps_per_execution: int
    jit_compile: bool
    run_eagerly: bool = False


def step_settings(
    model: keras.Model, cfg: Any, *, own_compile: bool, strategy: tf.distribute.Strategy
) -> StepSettings:
    """The step settings of `model`: its own compile's, or the config's.

    Args:
        model: the compiled model.
        cfg: the train config (`trainer.steps_per_execution`, `runtime.jit_compile`).
        own_compile: whether the user compiled `model` (its settings win over the
            config's, and a difference is one log line).
        strategy: the run's strategy (a parameter server cannot honour some).

    Returns:
        A `StepSettings`.

    Raises:
        ConfigError: naming `jit_compile` or `run_eagerly` for a compile a parameter-server
            run cannot honour.
    """
    configured = StepSettings(
        steps_per_execution=int(cfg.trainer.steps_per_execution),
        jit_compile=bool(cfg.runtime.jit_compile),
    )
    if not own_compile:
        return configured
    compiled = StepSettings(
        steps_per_execution=int(getattr(model, "steps_per_execution", 1) or 1),
        jit_compile=bool(model.jit_compile),
        run_eagerly=bool(model.run_eagerly),
    )
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        _check_parameter_server(model, compiled)
    differences = [
        f"{name}={getattr(compiled, name)} over {key}={getattr(configured, name)}"
        for name, key in (
            ("steps_per_execution", "trainer.steps_per_execution"),
            ("jit_compile", "runtime.jit_compile"),
        )
        if getattr(compiled, name) != getattr(configured, name)
    ]
    if differences:
        log.info("%s's own compile wins: %s", model.name, ", ".join(differences))
    return compiled


def _check_parameter_server(model: keras.Model, settings: StepSettings) -> None:
    if settings.jit_compile:
        raise ConfigError(
            "jit_compile",
            "cannot work under parameter_server: XLA compiles a step only with its "
            "variables on the device that runs it, and the parameter servers hold them",
            value=True,
            hint=f"compile {model.name} with jit_compile=False, or use mirrored",
        )
    if settings.run_eagerly:
        raise ConfigError(
            "run_eagerly",
            "cannot work under parameter_server: the chief schedules the step on the "
            "workers as a function, which cannot run eagerly",
            value=True,
            hint=f"compile {model.name} with run_eagerly=False, or use mirrored",
        )


@contextlib.contextmanager
def eager_if(run_eagerly: bool) -> Iterator[None]:
    """Run every `tf.function` eagerly inside the block when `run_eagerly` (Keras's
    `compile(run_eagerly=True)`: a `train_step` may call `.numpy()`)."""
    if not run_eagerly or tf.config.functions_run_eagerly():
        yield
        return
    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(False)


def check_optimizer(optimizer: Any, strategy: tf.distribute.Strategy) -> None:
    """Refuse Keras optimizer features the strategy cannot run, before training.

    Raises:
        ConfigError: naming `gradient_accumulation_steps` under more than one replica.
    """
    steps = getattr(optimizer, "gradient_accumulation_steps", None)
    if not steps or strategy.num_replicas_in_sync == 1:
        return
    raise ConfigError(
        "gradient_accumulation_steps",
        "cannot run over several replicas: Keras's optimizer applies its update inside "
        "a tf.cond, where the replicas' all-reduce (a merge_call) cannot run "
        "(keras-team/keras#20582); kdist's own accumulation is not the same run either, "
        "since Keras counts each micro-batch as a step (batch hooks, learning-rate "
        "schedule) and carries it over epoch ends",
        value=steps,
        hint=f"drop it from the optimizer and set trainer.accumulate_steps={steps} with "
        f"a global batch {steps} times larger (one update per global batch), or train on "
        "one device",
    )


class CompileWatch:
    """Tells a recompile of a model: Keras's `compile` makes a new `_compile_config`.

    `seen(model)` records the model's compile as the one kdist's step was built for;
    `changed(model)` says whether it was compiled again since.
    """

    def __init__(self) -> None:
        self._seen: Any = None

    def seen(self, model: keras.Model) -> None:
        self._seen = compile_config(model)

    def changed(self, model: keras.Model) -> bool:
        current = compile_config(model)
        return current is not None and current is not self._seen
