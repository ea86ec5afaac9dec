"""The fit path's binding: the model, the data and the compile made into a runner.

`Binding` is a base of `kdist.Experiment` (`kdist.experiment.job`): at each `fit` the
model is bound to the data it trains on, with the step its compile asks for
(`kdist.experiment.compile_state`), as Keras's `make_train_function` reads the compiled
model; a recompile or new data binds it anew.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import keras
import tensorflow as tf
from omegaconf import DictConfig

from kdist.compat.keras_private import inputs_struct
from kdist.config.errors import ConfigError
from kdist.config.objective import check_monitors, check_objective, metric_directions
from kdist.data.in_hand import Given, check_inputs
from kdist.data.pipeline import run_dataset_fn
from kdist.data.pipeline import steps_per_epoch as steps_per_epoch_of
from kdist.data.source import Source
from kdist.engine import Controller, Runner, Schedule
from kdist.engine.epoch_clock import keras_epoch_lengths
from kdist.experiment import batch_plan, outputs
from kdist.experiment.build import check_targets, compiled_losses, output_classes, runner_for
from kdist.experiment.compile_state import (
    CompileWatch,
    StepSettings,
    check_optimizer,
    step_settings,
)
from kdist.run_setup import RunSetup
from kdist.runs import resume_check

log = logging.getLogger(__name__)

__all__ = ["Binding"]


class Binding:
    """`Experiment`'s runner and controller for its model, data and compile (a base class)."""

    cfg: DictConfig
    strategy: tf.distribute.Strategy
    source: Source
    model: keras.Model | None
    controller: Controller | None
    runner: Runner | None
    validates: bool
    steps_per_epoch: int
    num_replicas: int
    is_chief: bool
    run_dir: Path
    output_dir: Path
    _bound: Source | None
    _given: Given | None
    _own_compile: bool
    _settings: StepSettings
    _watch: CompileWatch
    setup: RunSetup

    def _check_objective(self, model: keras.Model) -> None:
        """`objective` and the callbacks' monitors against what `model` logs."""
        logged = list(model.get_metrics_result())
        check_objective(
            self.cfg.get("objective"),
            logged,
            validates=self.validates,
            auto=self.setup.objective_auto,
            direction_auto=self.setup.direction_auto,
            directions=metric_directions(model),
        )
        check_monitors(self.cfg, logged)

    def _takes_source(self, model: keras.Model) -> bool:
        """Whether `model`'s inputs take the config's data (a subclassed model: yes, it
        is built from it, as `build_model` has always done)."""
        if inputs_struct(model) is None and not model.built:
            return True
        try:
            # A built subclassed model is called on the data (symbolically): in the scope,
            # where the layers it may build must make their variables.
            with self.strategy.scope():
                check_inputs(model, self.source.dataset("train").element_spec, key="data.source")
        except ConfigError:
            return False
        return True

    def _schedule(self) -> Schedule:
        """The controller's schedule: the config's, with the step settings' hooks.

        Keras's `fit` on data without end (a generator, a `repeat()`ed dataset) with
        `steps_per_epoch`: its `EpochIterator` makes a call at every multiple of
        `steps_per_execution` below `steps_per_epoch`, and each call runs all of its
        steps while the data lasts, so an epoch trains `steps_per_epoch` rounded up to a
        multiple of `steps_per_execution` (9 steps for 7 at 3 a call); kdist's epoch is
        as long for a model the user compiled (whose `steps_per_execution` it is).
        """
        per_epoch, per_call = self.steps_per_epoch, self._settings.steps_per_execution
        given = self._given
        if self._own_compile and given is not None and given.endless and per_epoch % per_call:
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
            batches = steps_per_epoch_of(self.source, int(self.cfg.trainer.global_batch_size), None)
            if per_epoch < batches:
                lengths = keras_epoch_lengths(batches, per_epoch, per_call)
        return batch_plan.schedule(
            self.cfg.trainer, per_epoch, steps_per_execution=per_call, epoch_lengths=lengths
        )

    def _bind(self, *, recompiled: bool = False) -> None:
        """Build the runner (and controller) that trains `self.model` on `self.source`.

        The model is built from the data (if unbuilt), the targets, inputs and objective
        are checked, and a controller that already trained this model goes on with it
        (with a new checkpoint of its new optimizer when it was `recompiled`).
        """
        cfg, model = self.cfg, self.model
        assert model is not None
        key = "x" if self._given is not None else "data.source"
        # The targets against the loss the model trains with (the user's own compile
        # when kept, not the config's) and the model's classes (a functional model's).
        if self._own_compile:
            loss, loss_key = compiled_losses(model), f"{model.name}'s compiled loss"
        else:
            loss, loss_key = cfg.trainer.get("loss"), "trainer.loss"
        check_targets(
            loss,
            self.source,
            key=loss_key,
            data_key="y" if self._given is not None else key,  # class ids are y's
            num_classes=output_classes(model),
        )
        with self.strategy.scope():  # a model built here makes its variables in the scope
            check_inputs(model, self.source.dataset("train").element_spec, key=key)
        # Keras's `make_train_function` reads the model's compile: so does kdist's step.
        settings = step_settings(model, cfg, own_compile=self._own_compile, strategy=self.strategy)
        check_optimizer(model.optimizer, self.strategy)
        self._settings = settings
        schedule = self._schedule()
        runner = runner_for(
            cfg,
            self.strategy,
            model,
            self.source,
            schedule,
            validates=self.validates,
            jit_compile=settings.jit_compile,
        )
        self._check_objective(model)
        # The config as resolved (batch, objective), before training; over a folder
        # with checkpoints only once `restore` has checked it against theirs.
        if self.is_chief and (
            self.setup.resumed_in(self.run_dir) or not resume_check.holds_checkpoints(self.run_dir)
        ):
            outputs.write_config(self.output_dir, cfg)
        train_data = functools.partial(run_dataset_fn, cfg, self.source, "train")
        previous = self.controller
        if previous is not None and previous.model is model and not recompiled:
            previous.schedule = schedule
            previous.use_runner(runner, train_data)
        else:
            self.controller = Controller(
                runner,
                model=model,
                schedule=schedule,
                train_data=train_data,
                strategy_name=type(self.strategy).__name__,
                num_replicas=self.num_replicas,
            )
            if previous is not None and previous.model is model:
                # A recompile (a new optimizer in the checkpoint): the run's steps and
                # epochs go on from where the last `fit` left them.
                self.controller.global_step = previous.global_step
                self.controller.numbers = previous.numbers
                self.controller.use_runner(runner, train_data)
        self._watch.seen(model)
        self.runner, self._bound = runner, self.source
