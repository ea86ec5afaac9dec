"""The controller: the owner of one run (compare Orbit's `orbit/controller.py`).

It holds the global step and the checkpoint, restores at the start, saves on its savers'
schedule, drives the Keras `CallbackList`, runs validation and ends training. A runner
(`kdist.engine.runner.Runner`) only runs steps.

`Controller._train` (with `_epoch_calls`, the calls of one epoch) is Keras's `fit` loop
transcribed (`fit` in Keras 3.15's `backend/tensorflow/trainer.py`): the same hooks in the
same order with the same logs, Keras's own rules called where Keras has them
(`CallbackList`, `Trainer._should_eval` and the model's `_initial_epoch` through
`kdist.compat.keras_private`, `optimizer.finalize_variable_values`). kdist's additions
(step-exact resume, savers and backups, the call gate of background writes, the runner's
dispatch under any strategy) are marked `# kdist:` with the Keras line they extend.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import keras
import tensorflow as tf

from kdist.compat.keras_private import initial_epoch_of, should_eval
from kdist.data.pipeline import DatasetFn
from kdist.engine.after_failure import close_files, finish_writes
from kdist.engine.checkpoint.host_copies import TRAIN_CALLS
from kdist.engine.checkpoint.parts import checkpoint_of, restore_parts, run_parts
from kdist.engine.epoch_clock import EpochNumbers, Schedule
from kdist.engine.runner import Runner, non_finite_loss, wants_test_hooks
from kdist.engine.state import TrainingState, describe_resume, resume_point
from kdist.runs.disk_full import named_disk_full
from kdist.runs.layout import clean_leftovers

__all__ = ["Controller", "FitResult", "Saver", "Schedule"]

log = logging.getLogger(__name__)


class Saver(Protocol):
    """What the controller needs of a checkpoint writer (`kdist.engine.checkpoint`)."""

    every_n_steps: int

    def bind(self, runner: Runner) -> None: ...

    def save(self, steps: int, *, wait: bool = True) -> str | None: ...

    def after_steps(self, steps: int) -> None: ...

    def after_epoch(self, steps: int) -> None: ...

    def finish(self, steps: int) -> None: ...

    def sync(self) -> None: ...

    def release(self) -> None: ...


@dataclass
class FitResult:
    """What `Controller.fit` returns besides the Keras `History`."""

    history: keras.callbacks.History
    epochs_run: int
    steps_run: int
    train_seconds: float
    final_logs: dict[str, float] = field(default_factory=dict)
    # The run's epochs done, those of the sessions it resumed included.
    run_epochs: int = 0


def _next_count(step: int, global_step: int, limit: int, intervals: Sequence[int]) -> int:
    """Steps in the next call: at most `limit`, ending on every multiple in `intervals`."""
    count = limit
    for interval in intervals:
        if interval > 0:
            count = min(count, interval - global_step % interval)
    return max(count, 1)


class Controller:
    """Train a model with a runner: restore, epochs of K-step calls, saves, validation.

    Batch hooks run once per call of the runner (every `steps_per_execution` steps), as
    in Keras's `fit`; `model.stop_training` set by a callback ends the run after the
    current call. Calls end on every saver's step multiple, so a save happens exactly at
    a multiple of its `every_n_steps`.

    Args:
        runner: how steps run under the strategy.
        model: the compiled, built model (with its optimizer).
        schedule: epochs, steps and the global batch.
        train_data: the training `dataset_fn` that starts after a number of consumed
            examples (a resumed run's data position).
        strategy_name: the strategy's class name, recorded in checkpoints.
        num_replicas: replicas in sync, recorded in checkpoints.
    """

    def __init__(
        self,
        runner: Runner,
        *,
        model: keras.Model,
        schedule: Schedule,
        train_data: Callable[[int], DatasetFn],
        strategy_name: str,
        num_replicas: int,
    ):
        self.runner = runner
        self.model = model
        self.schedule = schedule
        self.global_step = 0
        # The one epoch clock: which epoch a step is in, Keras's numbers and the run's.
        self.numbers = EpochNumbers()
        self._train_data = train_data
        # A restored run's data position in examples, placed when it next trains (`fit`).
        self._data_at: int | None = None
        self._strategy_name = strategy_name
        self._num_replicas = num_replicas
        # Plain host variables, identical on every worker: built outside any scope.
        self.state = TrainingState(
            strategy_name=strategy_name,
            num_replicas=num_replicas,
            global_batch_size=schedule.global_batch_size,
        )
        self._metrics = tf.Module(name="kdist_running_metrics")
        self._metrics.variables_list = list(runner.metric_variables)
        # Every part of the checkpoint, each required or not (`kdist.engine.checkpoint.parts`).
        self.parts = run_parts(model, self.state, self._metrics, runner)
        self.checkpoint = checkpoint_of(self.parts)

    # -- resuming ------------------------------------------------------------------------

    def restore(self, backup_dir: Path, checkpoint_dir: Path, *, clean: bool) -> int:
        """Resume from the newest readable backup, else the newest readable checkpoint.

        The checkpoint's parts are restored (`kdist.engine.checkpoint.parts`); the step is
        mapped onto this run's global batch (logged), so a run can resume under another
        strategy or replica count. The data position is placed when the run next trains.

        Args:
            backup_dir: the run's `backup/` folder.
            checkpoint_dir: the run's `checkpoints/` folder, used when `backup/` holds
                nothing (deleted, or never written).
            clean: remove the `*_temp*` leftovers of an interrupted save first (the chief).

        Returns:
            The global step to continue from (0 when there is nothing to restore).

        Raises:
            kdist.engine.state.CheckpointError: when checkpoints exist but none reads.
        """
        if clean:
            for folder in (backup_dir, checkpoint_dir):
                clean_leftovers(folder)
        path = self._restore_newest(backup_dir, checkpoint_dir)
        self.numbers = EpochNumbers()
        self._data_at = None
        if path is None:
            self.global_step = 0
            return 0
        point = resume_point(self.state, path)
        batch = self.schedule.global_batch_size
        steps = point.examples // batch
        log.info(
            describe_resume(
                point,
                strategy_name=self._strategy_name,
                replicas=self._num_replicas,
                batch=batch,
                steps_per_epoch=self.schedule.steps_per_epoch,
            )
        )
        # From here on the checkpoints describe this run (its strategy, replicas, batch).
        self.state.steps.assign(steps)
        self.state.strategy_name.assign(self._strategy_name)
        self.state.num_replicas.assign(self._num_replicas)
        self.state.global_batch_size.assign(batch)
        self._data_at = point.examples
        self.global_step = steps
        return steps

    def _skip_to_epoch(self, epoch: int) -> None:
        """Go on at the start of epoch `epoch`, restored by a Keras `BackupAndRestore`:
        the global step and the data position follow (kdist's step-exact resume).

        The data position counts from the epoch origin, where this `fit`'s data starts:
        a later `fit` after an interrupted one starts its data anew, as Keras's does.
        """
        steps_in = self.numbers.steps_into_data(epoch, self.schedule.clock)
        self.global_step = self.numbers.origin_step + steps_in
        self.state.steps.assign(self.global_step)
        examples = steps_in * self.schedule.global_batch_size
        self.runner.set_train_dataset_fn(self._train_data(examples))

    def _restore_newest(self, backup_dir: Path, checkpoint_dir: Path) -> str | None:
        return restore_parts(self.parts, backup_dir, checkpoint_dir, model=self.model)

    def use_runner(self, runner: Runner, train_data: Callable[[int], DatasetFn]) -> None:
        """Train on from here with another runner of the same model (data given anew).

        The new data's epochs start at the next epoch: after a partly trained epoch,
        that epoch counts as done.
        """
        self.numbers = self.numbers.new_data(self.global_step, self.schedule.clock)
        self.runner = runner
        self._train_data = train_data
        self._data_at = None  # the new data starts at its beginning
        # The runner may keep another averager (`strategy.sync`) for the model: a new
        # checkpoint then (its savers are made for the next `fit`).
        parts = run_parts(self.model, self.state, self._metrics, runner)
        if [p.value for p in parts if not p.required] != [
            p.value for p in self.parts if not p.required
        ]:
            self.parts, self.checkpoint = parts, checkpoint_of(parts)

    def start_at_epoch(self, epoch: int, *, again: bool = False) -> None:
        """Number the next epoch `epoch` (`fit`'s `initial_epoch`): the epochs of the next
        `fit` are `epoch, epoch + 1, ...` for every callback and the `History`, as in
        Keras, whatever the model trained before.

        `again`: the model trained before in this run (a later `fit`); kdist's run files
        go on counting the run's epochs (`EpochNumbers.run_shift`), Keras's numbers restart.
        """
        clock = self.schedule.clock
        self.numbers = self.numbers.started_at(int(epoch), self.global_step, clock, again=again)

    @property
    def epoch(self) -> int:
        """The epoch the next step belongs to (epochs done, a partial one not counted)."""
        return self.numbers.epoch(self.global_step, self.schedule.clock)

    def end_step(self, schedule: Schedule | None = None) -> int:
        """The global step at which `schedule` (the controller's own by default) ends."""
        schedule = schedule or self.schedule
        return self.numbers.step_at(schedule.epochs, schedule.clock)

    def save_now(self, saver: Saver) -> None:
        """Save with `saver` at the current step, complete on return (a preemption)."""
        saver.save(self.global_step)

    # -- training ------------------------------------------------------------------------

    def fit(
        self,
        callbacks: Sequence[keras.callbacks.Callback] = (),
        *,
        savers: Sequence[Saver] = (),
        verbose: int = 0,
    ) -> FitResult:
        """Train from the current global step to the end of the schedule.

        Args:
            callbacks: the Keras callbacks, in the order they run. Defaults to `()`.
            savers: checkpoint writers, called after the callbacks' hooks (so a guard
                that raises stops a save of bad weights); each is bound to the runner
                first (`Saver.bind`), whose next call may copy a save's variables.
                Defaults to `()`.
            verbose: Keras's progress bar setting (0, 1 or 2). Defaults to `0`.

        Returns:
            A `FitResult` with the `History`. A run resumed at its last step trains
            nothing and reports one validation of the model as it is.
        """
        schedule = self.schedule
        callback_list = keras.callbacks.CallbackList(
            list(callbacks),
            add_history=True,
            add_progbar=verbose != 0,
            model=self.model,
            verbose=verbose,
            epochs=schedule.epochs,
            steps=None if schedule.open_ended else schedule.steps_per_epoch,
        )
        if self.global_step >= self.end_step():
            log.info(
                "the run is at step %d of %d: training is already done",
                self.global_step,
                self.end_step(),
            )
        if self._data_at is not None:
            # kdist: a restored run reads on from its data position; the runner takes
            # back what it keeps between calls (a sync mode's replicas, `strategy.sync`).
            self.runner.set_train_dataset_fn(self._train_data(self._data_at))
            self._data_at = None
        try:
            for saver in savers:
                saver.bind(self.runner)  # before the first call: it may trace the train function
            result = self._train(callback_list, savers)
        except BaseException as error:
            close_files(callback_list.callbacks)
            finish_writes(savers)
            failure = self.runner.failure(error) or named_disk_full(error)
            if failure is not None:
                raise failure from error
            raise
        if not result.final_logs:
            val = self.runner.evaluate()
            result.final_logs = {f"val_{k}": v for k, v in val.items()}
        return result

    def _epoch_calls(
        self,
        step: int,
        per_epoch: int,
        callbacks: keras.callbacks.CallbackList,
        savers: Sequence[Saver],
    ) -> tuple[int, Sequence[Saver]]:
        """An epoch's calls of the train function, from its `step` to `per_epoch` (or
        until a callback stops training or the data ends).

        Returns:
            The epoch's step where its calls ended, and the savers that still save (none
            once Keras's `TerminateOnNaN` stopped training on a non-finite loss).
        """
        schedule, runner, model = self.schedule, self.runner, self.model
        intervals = [saver.every_n_steps for saver in savers]
        # Keras: `for begin_step, end_step, iterator in epoch_iterator`, one call of
        # `train_function` (`steps_per_execution` steps) between the batch hooks.
        # kdist: a call also ends on each saver's step multiple, and runs under the
        # call gate (background writes wait for the call to start).
        while step < per_epoch and not model.stop_training:
            # kdist: data that may end inside an epoch (`Runner.open_ended`), a step a call.
            per_call = 1 if runner.open_ended else schedule.steps_per_execution
            limit = min(per_call, per_epoch - step)
            count = _next_count(step, self.global_step, limit, intervals)
            callbacks.on_train_batch_begin(step)
            TRAIN_CALLS.open()  # background writes may start (`CallGate`)
            try:
                batch_logs = runner.train_steps(count)
            finally:
                TRAIN_CALLS.close()
            if runner.data_ended:  # Keras: the call finding the data ended has no end hook
                break
            # Keras: `end_step = begin_step + steps_per_execution - 1`, past the
            # epoch's last batch for its last call. kdist: a call cut short at a
            # saver's step ends at its own last step.
            end = step + per_call - 1 if count == limit else step + count - 1
            step += count
            self.global_step += count
            callbacks.on_train_batch_end(end, batch_logs)
            if model.stop_training and non_finite_loss(batch_logs):
                savers = ()  # a TerminateOnNaN stopped it: nothing of this state saved
            for saver in savers:
                saver.after_steps(self.global_step)
        return step, savers

    def _train(self, callbacks: keras.callbacks.CallbackList, savers: Sequence[Saver]) -> FitResult:
        schedule, runner, model = self.schedule, self.runner, self.model
        clock = schedule.clock
        model.stop_training = False
        runner.fit_begin()  # Keras: `self._maybe_symbolic_build(iterator=epoch_iterator)`
        callbacks.on_train_begin()  # Keras: `self.stop_training = False` ... on_train_begin
        # Keras: `initial_epoch = self._initial_epoch or initial_epoch` (a Keras
        # `BackupAndRestore` restored a later epoch's weights in `on_train_begin`).
        # kdist: the epoch is where the global step is (`fit(initial_epoch=...)` set its
        # number, `start_at_epoch`); a resumed run starts inside its epoch.
        restored = initial_epoch_of(model)
        if restored:
            self._skip_to_epoch(restored)
        test_hooks = wants_test_hooks(callbacks.callbacks)
        numbers = self.numbers
        initial_epoch = numbers.epoch(self.global_step, clock)
        first_step = self.global_step - numbers.step_at(initial_epoch, clock)
        logs: dict[str, float] = {}
        epochs_run = steps_run = 0
        started = time.perf_counter()
        for epoch in range(initial_epoch, schedule.epochs):
            step = first_step if epoch == initial_epoch else 0
            per_epoch = numbers.length(epoch, clock)
            # Keras: `self.reset_metrics()`. kdist: the runner resets them in the epoch's
            # first call (`Runner.train_loop_begin`); a resumed epoch keeps the running
            # metrics restored with the checkpoint.
            runner.train_loop_begin(reset_metrics=step == 0, first_step=step)
            callbacks.on_epoch_begin(epoch)
            begun = step
            step, savers = self._epoch_calls(step, per_epoch, callbacks, savers)
            steps_run += step - begun
            # Keras: `epoch_logs = dict(self._get_metrics_result_or_logs(logs))`: the
            # runner returns the model's metrics as floats.
            logs = runner.train_loop_end(complete=step >= per_epoch or runner.data_ended)
            # Keras: `if validation_data is not None and self._should_eval(epoch,
            # validation_freq)`. kdist: the command line also validates the last epoch
            # (`Schedule.validate_last`).
            last = epoch + 1 == schedule.epochs or model.stop_training or runner.data_ended
            due = should_eval(epoch, schedule.validation_freq) or (schedule.validate_last and last)
            if due and runner.validates:
                # Keras: `self.evaluate(..., callbacks=callbacks)`. kdist: its calls and
                # test-batch hooks where a callback defines them, else one compiled loop.
                callbacks.on_test_begin()
                val_logs = runner.evaluate(callbacks if test_hooks else None)
                callbacks.on_test_end(val_logs)
                logs.update({f"val_{name}": value for name, value in val_logs.items()})
            callbacks.on_epoch_end(epoch, logs)
            for saver in savers:  # kdist: checkpoints and backups at the epoch's end
                saver.after_epoch(self.global_step)
            epochs_run += 1
            if runner.data_ended:
                # Keras's next epoch would find no data ("Your input ran out of data"):
                # kdist's training ends with the data.
                log.warning("the data given to fit ended in epoch %d: training ends", epoch + 1)
                break
            if model.stop_training:
                break
        train_seconds = time.perf_counter() - started
        # Keras: `self.optimizer.finalize_variable_values(self.trainable_weights)` (the
        # EMA weights copied into the model with `use_ema=True`), before `on_train_end`.
        optimizer = model.optimizer
        if isinstance(optimizer, keras.optimizers.Optimizer) and schedule.epochs > 0:
            runner.settle()  # kdist: every scheduled step applied (parameter servers)
            optimizer.finalize_variable_values(model.trainable_weights)
        callbacks.on_train_end(logs)
        for saver in savers:
            saver.finish(self.global_step)
        return FitResult(
            history=model.history,
            epochs_run=epochs_run,
            run_epochs=initial_epoch + epochs_run + numbers.run_shift,
            steps_run=steps_run,
            train_seconds=train_seconds,
            final_logs=dict(logs),
        )
