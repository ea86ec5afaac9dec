"""The parts of one `Experiment.fit` call, in the order Keras's `fit` takes them.

`Experiment.fit` (`kdist.experiment.job`) reads as `TensorFlowTrainer.fit`: the data
(`read_data`, `use_data`: Keras's data adapter and `EpochIterator`), the call's schedule
(`schedule_call`), kdist's resume of the run folder at the first call (`resumes`), the
epochs of the call (`plan_epochs`: `initial_epoch .. epochs - 1`), the callbacks, the
loop (`kdist.engine.controller.Controller.fit`), and kdist's addition at the end, the
run's files (`write_outputs`). Each takes the `Experiment` it works for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from typing import Any

import keras

from kdist.callbacks.factory import RunCallbacks, build_run
from kdist.config.objective import metric_directions
from kdist.data.in_hand import check_inputs
from kdist.data.in_hand.arrays import non_finite_allowed
from kdist.data.in_hand.dispatch import kind_of
from kdist.data.pipeline import steps_per_epoch as steps_per_epoch_of
from kdist.engine import Controller
from kdist.experiment import binding, outputs, run_data
from kdist.experiment.fit_arguments import (
    FitArguments,
    FitData,
    read_fit_data,
    warn_stream_resume,
)

__all__ = [
    "KERAS_BATCH_SIZE",
    "check_validation",
    "keras_batch_size",
    "plan_epochs",
    "read_data",
    "resumes",
    "run_callbacks",
    "schedule_call",
    "use_data",
    "write_outputs",
]

log = logging.getLogger(__name__)


# `model.fit`'s batch of arrays when `batch_size` is left out.
KERAS_BATCH_SIZE = 32


def keras_batch_size(exp: Any, x: Any, batch_size: int | None) -> int | None:
    """`fit`'s batch: Keras's `fit` batches arrays by 32 when `batch_size` is left out, for
    a model the user compiled; the config's batch is the default of the command line and
    of kdist's models."""
    if batch_size is not None or x is None or exp.model is None:
        return batch_size
    if not (exp._own_compile or exp._watch.changed(exp.model)):
        return batch_size
    return KERAS_BATCH_SIZE if kind_of(x) == "arrays" else None


def check_validation(exp: Any, controller: Controller) -> None:
    """Validation data given to `fit` against the model: before the first epoch, not
    after it (Keras fails there, after training)."""
    if exp._given is not None and exp.source.size("validation"):
        spec = exp.source.dataset("validation").element_spec
        check_inputs(controller.model, spec, key="validation_data")


def run_callbacks(exp: Any, controller: Controller, callbacks: Any, verbose: int) -> RunCallbacks:
    """The run's callbacks and savers (`kdist.callbacks.factory`), then the user's; the
    run's best-model export is `exp.best_model`."""
    run = build_run(
        exp.cfg,
        controller=controller,
        strategy=exp.strategy,
        run_dir=exp.run_dir,
        output_dir=exp.output_dir,
        is_chief=exp.is_chief,
        directions=metric_directions(exp.model),
        extra=callbacks,
        verbose=verbose,
        cluster=exp.setup.cluster,
        job=exp.setup.job,
    )
    exp.best_model = run.best_model
    return run


def read_data(exp: Any, arguments: FitArguments, callbacks: Any) -> FitData | None:
    """`fit`'s data as Keras's data adapters read it (`read_fit_data`), or `None` for the
    data of the last call (or the config's).

    With Keras's `TerminateOnNaN` among the callbacks, non-finite data is read, as `fit`
    reads it, for the callback to act on the loss it gives.
    """
    terminates = any(isinstance(c, keras.callbacks.TerminateOnNaN) for c in callbacks)
    with non_finite_allowed() if terminates else contextlib.nullcontext():
        return read_fit_data(
            arguments,
            strategy=exp.strategy,
            configured=exp._configured,
            previous=exp._given_args,
            fitted_batch=exp.plan.global_batch_size if exp._fitted else None,
        )


def use_data(exp: Any, found: FitData | None) -> None:
    """Make `fit`'s data (`read_data`) the run's: `exp.source` and `exp.plan`."""
    if found is None:
        return  # the data of the last call (or the config's), or the same again
    given, args, plan = found.given, found.args, found.plan
    accumulate = int(exp.cfg.trainer.get("accumulate_steps", 1))
    run_data.check_split(plan.global_batch_size, exp.num_replicas, accumulate)
    source = given.source if given is not None else exp.source
    per_epoch = plan.steps_per_epoch
    batch = plan.global_batch_size
    exp.steps_per_epoch = steps_per_epoch_of(source, batch, per_epoch)
    exp.plan, exp.source, exp._given, exp._given_args = plan, source, given or exp._given, args
    if per_epoch and exp._given is not None:  # data with an end: Keras's epochs
        endless = exp._given.endless
        exp.steps_per_epoch = run_data.steps_within_data(
            source, batch, exp.steps_per_epoch, endless=endless
        )
    exp.validates = bool(exp.cfg.trainer.validation) and source.size("validation") > 0
    exp._bound = None  # the runner reads the data anew (the plan changed)
    if given is not None:
        log.info("%s; %d steps per epoch", given.describe(), exp.steps_per_epoch)


def schedule_call(exp: Any, controller: Controller, arguments: FitArguments) -> None:
    """The call's schedule on `controller`: the config's (a notebook may change
    `trainer.epochs` between two `fit` calls), with Keras's validation rule alone when
    the call gives `validation_freq` (`Schedule.validate_last`)."""
    controller.schedule = binding.schedule_of(exp, exp._settings)
    if arguments.validation_freq is not None:
        controller.schedule = dataclasses.replace(controller.schedule, validate_last=False)


def resumes(exp: Any) -> bool:
    """Whether this call first resumes the run folder's backup (`Experiment.restore`):
    kdist's addition, at the first `fit` of an `Experiment` with backups on."""
    return not exp._fitted and bool(exp.cfg.callbacks.backup.enabled)


def plan_epochs(
    exp: Any, controller: Controller, arguments: FitArguments, *, resumed: bool
) -> None:
    """The epochs this call trains (`arguments.epochs`, `initial_epoch`), on
    `controller.schedule` (`schedule_call`), after the resume (`resumed`: a backup was
    restored).

    Keras's numbers: `initial_epoch .. epochs - 1` for the callbacks and the `History`,
    a later `fit` too (kdist's run files go on counting the run's epochs,
    `EpochNumbers.run_shift`); `epochs=None` trains to the run's `trainer.epochs`. A
    call that trains nothing says so.
    """
    epochs, initial_epoch = arguments.epochs, arguments.initial_epoch
    if resumes(exp):
        warn_stream_resume(exp._given, exp.steps_per_epoch, controller.global_step)
    elif not exp._fitted:
        controller.global_step = 0
    if epochs is not None:
        if not resumed:
            controller.start_at_epoch(int(initial_epoch), again=exp._fitted)
        more = int(epochs) - int(initial_epoch)
        controller.schedule = dataclasses.replace(
            controller.schedule, epochs=controller.epoch + max(more, 0)
        )
    if controller.global_step >= controller.end_step():
        log.warning(
            "fit trains nothing: the model is at epoch %d (step %d) and %s; %s",
            controller.epoch,
            controller.global_step,
            f"epochs={epochs}, initial_epoch={initial_epoch} asks for no more"
            if epochs is not None
            else f"trainer.epochs={exp.cfg.trainer.epochs} is reached",
            "pass epochs=N to train N epochs more",
        )


def write_outputs(exp: Any, run: Any, started: float) -> None:
    """kdist's addition after the loop: the run's files (`kdist.experiment.outputs`),
    `metrics.json` with the call's wall time."""
    summary = exp.metrics() | {"wall_seconds": time.perf_counter() - started}
    outputs.write(
        exp.output_dir,
        exp.run_dir,
        run,
        metrics=summary,
        cfg=exp.cfg,
        model=exp.controller.model,
    )
