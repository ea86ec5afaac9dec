"""The fit path's binding: the model, the data and the compile made into a runner.

Functions of the `kdist.Experiment` they bind (`kdist.experiment.job`): at each `fit`
the model is bound to the data it trains on, with the step its compile asks for, as
Keras's `make_train_function` reads the compiled model; a recompile or new data binds it
anew (`controller_of`).

What the compiled model says about its step is read at every `fit` (issue 42): Keras's
`make_train_function` reads the model's `steps_per_execution`, `jit_compile` and
`run_eagerly`, and Keras's `compile` drops the cached `train_function`. kdist reads the
same (`step_settings`): a model the user compiled trains with its own settings (the
config's `trainer.steps_per_execution` and `runtime.jit_compile` are the defaults of the
models kdist compiles), and a recompile (`CompileWatch`) rebuilds kdist's step.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import keras
import tensorflow as tf

from kdist.compat.keras_private import compile_config, inputs_struct
from kdist.config.errors import ConfigError
from kdist.config.objective import check_monitors, check_objective, metric_directions
from kdist.data.in_hand import check_inputs
from kdist.data.pipeline import steps_per_epoch as steps_per_epoch_of
from kdist.engine import Controller, Runner, Schedule
from kdist.engine.epoch_clock import keras_epoch_lengths
from kdist.experiment import outputs, run_data
from kdist.experiment.build import (
    check_is_model,
    check_targets,
    compiled_losses,
    compiled_model,
    output_classes,
    runner_for,
    strategy_for,
)
from kdist.experiment.run_data import run_dataset_fn
from kdist.runs import resume_check

log = logging.getLogger(__name__)

__all__ = [
    "Bound",
    "CompileWatch",
    "StepSettings",
    "bind",
    "build_model",
    "check_objective_of",
    "check_optimizer",
    "controller_of",
    "eager_if",
    "model_for",
    "rebind",
    "schedule_of",
    "step_settings",
    "takes_source",
]


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

    @classmethod
    def of_config(cls, cfg: Any) -> StepSettings:
        """The settings the config asks for (`trainer.steps_per_execution`,
        `runtime.jit_compile`), before any compile of the user's."""
        return cls(
            steps_per_execution=int(cfg.trainer.steps_per_execution),
            jit_compile=bool(cfg.runtime.jit_compile),
        )


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
    configured = StepSettings.of_config(cfg)
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


def check_objective_of(exp: Any, model: keras.Model) -> None:
    """`objective` and the callbacks' monitors against what `model` logs."""
    logged = list(model.get_metrics_result())
    check_objective(
        exp.cfg.get("objective"),
        logged,
        validates=exp.validates,
        auto=exp.setup.objective_auto,
        direction_auto=exp.setup.direction_auto,
        directions=metric_directions(model),
    )
    check_monitors(exp.cfg, logged)


def takes_source(exp: Any, model: keras.Model) -> bool:
    """Whether `model`'s inputs take the config's data (a subclassed model: yes, it
    is built from it, as `build_model` has always done)."""
    if inputs_struct(model) is None and not model.built:
        return True
    try:
        # A built subclassed model is called on the data (symbolically): in the scope,
        # where the layers it may build must make their variables.
        with exp.strategy.scope():
            check_inputs(model, exp.source.dataset("train").element_spec, key="data.source")
    except ConfigError:
        return False
    return True


def schedule_of(exp: Any, settings: StepSettings) -> Schedule:
    """The controller's schedule: the config's, with the step settings' hooks.

    Keras's `fit` on data without end (a generator, a `repeat()`ed dataset) with
    `steps_per_epoch`: its `EpochIterator` makes a call at every multiple of
    `steps_per_execution` below `steps_per_epoch`, and each call runs all of its
    steps while the data lasts, so an epoch trains `steps_per_epoch` rounded up to a
    multiple of `steps_per_execution` (9 steps for 7 at 3 a call); kdist's epoch is
    as long for a model the user compiled (whose `steps_per_execution` it is).
    """
    per_epoch, per_call = exp.steps_per_epoch, settings.steps_per_execution
    given = exp._given
    if exp._own_compile and given is not None and given.endless and per_epoch % per_call:
        rounded = -(-per_epoch // per_call) * per_call
        log.info(
            "steps_per_epoch=%d with steps_per_execution=%d on data without end: "
            "%d steps an epoch, as Keras's fit runs every call whole",
            per_epoch,
            per_call,
            rounded,
        )
        per_epoch = rounded
    lengths = None
    if given is not None and not given.endless:
        # Keras's epochs over data with an end (`kdist.engine.epoch_clock`).
        batches = steps_per_epoch_of(exp.source, exp.plan.global_batch_size, None)
        if per_epoch < batches:
            lengths = keras_epoch_lengths(batches, per_epoch, per_call)
    return run_data.schedule(
        exp.cfg.trainer, exp.plan, per_epoch, steps_per_execution=per_call, epoch_lengths=lengths
    )


class Bound(NamedTuple):
    """What `bind` makes: the runner, its controller and the step settings they use."""

    runner: Runner
    controller: Controller
    settings: StepSettings


def bind(exp: Any, *, recompiled: bool = False) -> Bound:
    """The runner and the controller that train `exp.model` on `exp.source`: Keras's
    `make_train_function`, which reads the compiled model.

    The model is built from the data (if unbuilt), the targets, inputs and objective
    are checked, and a controller that already trained this model goes on with it
    (with a new checkpoint of its new optimizer when it was `recompiled`).
    """
    cfg, model = exp.cfg, exp.model
    assert model is not None
    key = "x" if exp._given is not None else "data.source"
    # The targets against the loss the model trains with (the user's own compile
    # when kept, not the config's) and the model's classes (a functional model's).
    if exp._own_compile:
        loss, loss_key = compiled_losses(model), f"{model.name}'s compiled loss"
    else:
        loss, loss_key = cfg.trainer.get("loss"), "trainer.loss"
    check_targets(
        loss,
        exp.source,
        key=loss_key,
        data_key="y" if exp._given is not None else key,  # class ids are y's
        num_classes=output_classes(model),
    )
    with exp.strategy.scope():  # a model built here makes its variables in the scope
        check_inputs(model, exp.source.dataset("train").element_spec, key=key)
    # Keras's `make_train_function` reads the model's compile: so does kdist's step.
    settings = step_settings(model, cfg, own_compile=exp._own_compile, strategy=exp.strategy)
    check_optimizer(model.optimizer, exp.strategy)
    schedule = schedule_of(exp, settings)
    runner = runner_for(
        cfg,
        exp.strategy,
        model,
        exp.source,
        exp.plan,
        schedule,
        validates=exp.validates,
        jit_compile=settings.jit_compile,
        previous=exp.runner,
    )
    check_objective_of(exp, model)
    # The config as resolved (batch, objective) with the data plan, before training;
    # over a folder with checkpoints only once `restore` has checked it against theirs.
    if exp.is_chief and (
        exp.setup.resumed_in(exp.run_dir) or not resume_check.holds_checkpoints(exp.run_dir)
    ):
        outputs.write_config(exp.output_dir, exp.plan.recorded(cfg))
    train_data = functools.partial(run_dataset_fn, cfg, exp.plan, exp.source, "train")
    previous = exp.controller
    if previous is not None and previous.model is model and not recompiled:
        previous.schedule = schedule
        previous.use_runner(runner, train_data)
        return Bound(runner, previous, settings)
    controller = Controller(
        runner,
        model=model,
        schedule=schedule,
        train_data=train_data,
        strategy_name=type(exp.strategy).__name__,
        num_replicas=exp.num_replicas,
    )
    if previous is not None and previous.model is model:
        # A recompile (a new optimizer in the checkpoint): the run's steps and
        # epochs go on from where the last `fit` left them.
        controller.global_step = previous.global_step
        controller.numbers = previous.numbers
        controller.use_runner(runner, train_data)
    return Bound(runner, controller, settings)


def rebind(exp: Any, *, recompiled: bool = False) -> None:
    """Bind `exp`'s model to its data anew (`bind`): its runner, controller and step
    settings, kept on `exp` with the compile and the source they were made for."""
    exp.runner, exp.controller, exp._settings = bind(exp, recompiled=recompiled)
    exp._watch.seen(exp.model)
    exp._bound = exp.source


def controller_of(exp: Any) -> Controller:
    """`exp`'s controller for its model, compile and data, bound anew where one changed."""
    if exp.model is None:
        build_model(exp, None)
    elif exp._watch.changed(exp.model):
        # Keras's `compile` drops its `train_function`: a new optimizer, loss,
        # metrics, trainable set and step settings, so kdist's step is built anew.
        log.info("%s was compiled again: its step is built anew", exp.model.name)
        exp._own_compile = True
        exp.optimizer = exp.model.optimizer
        rebind(exp, recompiled=True)
    elif exp._bound is not exp.source:
        if exp._model_from_config and not exp._fitted and not takes_source(exp, exp.model):
            # kdist's own model, built for other data and not trained: built anew
            # for the data given to `fit`.
            log.info("building %s again for the data given to fit", exp.model.name)
            build_model(exp, None)
        else:
            rebind(exp)
    assert exp.controller is not None
    return exp.controller


def build_model(exp: Any, model: keras.Model | None) -> keras.Model:
    """`Experiment.build_model`: `model` (else the config's) compiled in `exp`'s strategy,
    and bound to the config's data when it is made from it (or to data already given)."""
    cfg = exp.cfg
    if model is not None:
        # The strategy the model was made in, as Keras's `fit` (`strategy_for`).
        exp.strategy = strategy_for(model, exp.strategy)
        exp.num_replicas = int(exp.strategy.num_replicas_in_sync)
    check_is_model(model, exp.strategy)
    from_config = model is None
    if from_config:
        check_targets(cfg.trainer.get("loss"), exp.source)
    # The user's own compile (kept by `compiled_model`): its loss is the one checked.
    exp._own_compile = model is not None and bool(model.compiled and model.optimizer)
    # The config's data only where it is needed: a model to make from it, or the
    # run's length for a schedule that ends with the run (`run_data`).
    steps = None
    if not exp._own_compile and (from_config or run_data.needs_total_steps(cfg)):
        steps = run_data.schedule(cfg.trainer, exp.plan, exp.steps_per_epoch).total_steps
    source = exp.source if from_config else None
    model = compiled_model(cfg, exp.strategy, source, total_steps=steps, model=model)
    exp.model, exp.optimizer = model, model.optimizer
    exp._watch.seen(model)
    exp._model_from_config = from_config
    exp.runner, exp.controller, exp._bound = None, None, None
    # A user's model is built as `fit` builds it: on the first batch of the data `fit`
    # is given, in the strategy's scope; it meets the config's data only at a call
    # that trains or evaluates on it.
    if from_config or exp._given is not None:
        rebind(exp)
    return model


def model_for(exp: Any, x: Any) -> tuple[keras.Model, Runner | None]:
    """The model (and runner) `evaluate` or `predict` reads `x` with: a model no `fit`
    has bound to data, given data in hand, needs nothing of the config's data
    (`data.source`), as `model.evaluate` needs no other data."""
    if x is not None and exp.model is not None and exp.controller is None:
        return exp.model, None
    controller = controller_of(exp)
    return controller.model, controller.runner
