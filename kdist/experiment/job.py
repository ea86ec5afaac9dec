"""`Experiment`: one training job, the same from the command line and from a notebook.

It assembles a run, one call per step: config -> runtime -> strategy -> data -> model ->
runner -> controller. The controller (`kdist.engine.controller`) runs it; the callbacks
come from `kdist.callbacks.factory`; the files it leaves come from `kdist.experiment.outputs`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf
from omegaconf import DictConfig

from kdist import strategies
from kdist.callbacks.best_model import BestModelExport
from kdist.callbacks.factory import build_run
from kdist.cluster import chief
from kdist.compat.keras_private import flatten_layers, inputs_struct
from kdist.config.errors import ConfigError
from kdist.config.objective import (
    check_monitors,
    check_objective,
    metric_directions,
    resolve_objective,
)
from kdist.config.validate import validate
from kdist.data.in_hand import Given, check_inputs, given_batches
from kdist.data.pipeline import build_source, run_dataset_fn
from kdist.data.pipeline import steps_per_epoch as steps_per_epoch_of
from kdist.data.source import Source
from kdist.engine import Controller, FitResult, Runner
from kdist.engine.building import optimizer_steps
from kdist.experiment import batch_plan, outputs
from kdist.experiment.build import (
    check_targets,
    compiled_losses,
    compiled_model,
    output_classes,
    runner_for,
)
from kdist.experiment.evaluating import evaluate_batches, keras_return
from kdist.experiment.fit_arguments import (
    FitArguments,
    FitData,
    data_keys,
    read_fit_data,
    set_key,
    warn_stream_resume,
)
from kdist.experiment.predicting import predict_dataset, predict_split
from kdist.process import runtime
from kdist.runs import resume_check
from kdist.runs.layout import SAVE_FOLDERS, default_run_dir

__all__ = ["Experiment"]

log = logging.getLogger(__name__)


class Experiment:
    """Set up devices, seeds, precision and the strategy for a config, then train it.

    Creating an `Experiment` validates the config, applies `runtime`, builds the strategy
    and the data source, and checks that the global batch splits evenly over the replicas;
    each problem raises `ConfigError` naming the key before any training.

    Args:
        cfg: a composed train config (`kdist.compose(...)` or a Hydra app's).
        run_dir: where outputs go. Defaults to `None`: `cfg.run_dir` if set, else a new
            `outputs/<date>/<time>` folder.

    Example:

    ```python
    cfg = kdist.compose(["model=cnn", "strategy=mirrored", "runtime.logical_devices=2"])
    exp = kdist.Experiment(cfg)
    model = exp.build_model()
    history = exp.fit()
    exp.evaluate()
    ```
    """

    def __init__(self, cfg: DictConfig, *, run_dir: str | Path | None = None):
        objective = cfg.get("objective")
        self._objective_auto = objective is not None and objective.get("name") == "auto"
        self._direction_auto = objective is not None and objective.get("direction") == "auto"
        validate(cfg)
        resolve_objective(cfg)
        self.cfg = cfg
        self.run_dir = Path(run_dir or cfg.get("run_dir") or default_run_dir(microseconds=True))
        runtime.setup(cfg.runtime)
        self.strategy: tf.distribute.Strategy = strategies.build(cfg.strategy)
        self.num_replicas = int(self.strategy.num_replicas_in_sync)
        self.is_chief = chief.is_chief(self.strategy)
        batch = batch_plan.global_batch_size(cfg, self.num_replicas)
        self.source = build_source(cfg.data.source)
        per_epoch = cfg.trainer.get("steps_per_epoch")
        self.steps_per_epoch = steps_per_epoch_of(self.source, batch, per_epoch)
        self.output_dir = chief.writable_dir(self.run_dir, self.strategy)
        self.validates = bool(cfg.trainer.validation) and self.source.size("validation") > 0
        # The objective and the monitors are checked against what the model logs once it
        # is built (`build_model`): a user's model (from a notebook or `model._target_`)
        # logs its own metrics, whatever the config's `trainer.metrics` say.
        self.model: keras.Model | None = None
        self.optimizer: keras.optimizers.Optimizer | None = None
        self.runner: Runner | None = None
        self.controller: Controller | None = None
        self.result: FitResult | None = None
        self.best_model: BestModelExport | None = None
        # Data given to `fit` (`kdist.data.in_hand`), the arguments that made it, the
        # config keys it changes (their configured values), and the source the runner
        # reads. After a first `fit`, later ones go on from the model as it is.
        self._given: Given | None = None
        self._given_args: tuple[Any, ...] = ()
        self._configured = data_keys(cfg)
        self._bound: Source | None = None
        self._model_from_config = False
        self._own_compile = False
        self._fitted = False
        self._resume_checked = False
        log.info(
            "strategy %s with %d replica(s); %d steps per epoch of global batch %d",
            type(self.strategy).__name__,
            self.num_replicas,
            self.steps_per_epoch,
            batch,
        )

    def _check_objective(self, model: keras.Model) -> None:
        """`objective` and the callbacks' monitors against what `model` logs."""
        logged = list(model.get_metrics_result())
        check_objective(
            self.cfg.get("objective"),
            logged,
            validates=self.validates,
            auto=self._objective_auto,
            direction_auto=self._direction_auto,
            directions=metric_directions(model),
        )
        check_monitors(self.cfg, logged)

    def build_model(self, model: keras.Model | None = None) -> keras.Model:
        """Build the model, optimizer, loss, metrics, runner and controller for training.

        Args:
            model: a model to use instead of building `cfg.model`. Defaults to `None`.
                When it is already compiled (e.g. in a notebook), its compile is kept:
                its loss, loss weights, metrics and optimizer (with its configuration)
                replace `trainer.loss`, `trainer.metrics` and `optimizer`. A model made
                outside `strategy.scope()` is rebuilt in the scope from its config, with
                its weights and compile configuration (the optimizer restarts from its
                configuration, without slots), when it has variables or an optimizer
                already, or the strategy is distributed: train `exp.model` then. A
                model whose layers build on their first call is built by `fit`, on
                the first batch of the data it is given, in the scope.

        Returns:
            The compiled `keras.Model` (compiled so that `model.keras` reloads), built
            unless its layers build on their first call (then `fit` builds it).

        Raises:
            ConfigError: naming the key, for a loss, metric, target or objective that
                the model or the data cannot take (`kdist.modeling`, `kdist.config.objective`).
        """
        cfg = self.cfg
        from_config = model is None
        if from_config:
            check_targets(cfg.trainer.get("loss"), self.source)
        # The user's own compile (kept by `compiled_model`): its loss is the one checked.
        self._own_compile = model is not None and bool(model.compiled and model.optimizer)
        schedule = batch_plan.schedule(cfg.trainer, self.steps_per_epoch)
        model = compiled_model(
            cfg, self.strategy, self.source, total_steps=schedule.total_steps, model=model
        )
        self.model, self.optimizer = model, model.optimizer
        self._model_from_config = from_config
        self.runner, self.controller, self._bound = None, None, None
        # A user's model is built as `fit` builds it: on the first batch of the data `fit`
        # is given, in the strategy's scope. It meets the config's data now only when it is
        # built already (every layer) and takes that data; else at `fit`.
        if (
            from_config
            or self._given is not None
            or (all(layer.built for layer in flatten_layers(model)) and self._takes_source(model))
        ):
            self._bind()
        return model

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

    def _bind(self) -> None:
        """Build the runner (and controller) that trains `self.model` on `self.source`.

        The model is built from the data (if unbuilt), the targets, inputs and objective
        are checked, and a controller that already trained this model goes on with it.
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
            loss, self.source, key=loss_key, data_key=key, num_classes=output_classes(model)
        )
        with self.strategy.scope():  # a model built here makes its variables in the scope
            check_inputs(model, self.source.dataset("train").element_spec, key=key)
        schedule = batch_plan.schedule(cfg.trainer, self.steps_per_epoch)
        runner = runner_for(
            cfg, self.strategy, model, self.source, schedule, validates=self.validates
        )
        self._check_objective(model)
        # The config as resolved (batch, objective), before training; over a folder
        # with checkpoints only once `restore` has checked it against theirs.
        if self.is_chief and (
            self._resume_checked or not resume_check.holds_checkpoints(self.run_dir)
        ):
            outputs.write_config(self.output_dir, cfg)
        train_data = functools.partial(run_dataset_fn, cfg, self.source, "train")
        if self.controller is not None and self.controller.model is model:
            self.controller.schedule = schedule
            self.controller.use_runner(runner, train_data)
        else:
            self.controller = Controller(
                runner,
                model=model,
                schedule=schedule,
                train_data=train_data,
                strategy_name=type(self.strategy).__name__,
                num_replicas=self.num_replicas,
            )
        self.runner, self._bound = runner, self.source

    def _controller(self) -> Controller:
        if self.model is None:
            self.build_model()
        elif self._bound is not self.source:
            if self._model_from_config and not self._fitted and not self._takes_source(self.model):
                # kdist's own model, built for other data and not trained: built anew
                # for the data given to `fit`.
                log.info("building %s again for the data given to fit", self.model.name)
                self.build_model()
            else:
                self._bind()
        assert self.controller is not None
        return self.controller

    def restore(self) -> int:
        """Resume from `<run_dir>/backup` (else `checkpoints/`): `Controller.restore`.

        The folder's checkpoints are first checked as the command line checks them
        (`kdist.runs.resume_check.check_resume`): the same refusals and allowed changes.

        Returns:
            The global step to continue from (0 when there is nothing to restore).

        Raises:
            ConfigError: naming the changed keys when the checkpoints were trained with
                other settings (unless `trainer.allow_resume_changes=true`).
        """
        if not self._resume_checked:
            # The command line's resume check, before this run's config is written over
            # the folder's: a changed setting is refused in one line, one allowed by
            # `trainer.allow_resume_changes` is applied after the restore (below).
            resume_check.check_resume(self.run_dir, self.cfg)
            self._resume_checked = True
        controller = self._controller()
        if self.is_chief:
            outputs.write_config(self.output_dir, self.cfg)
            if resume_check.holds_checkpoints(self.run_dir):
                resume_check.save_config(self.run_dir, self.cfg)
        # A change allowed on resume is applied after the restore (`kdist.runs.resume_check`).
        configured = resume_check.optimizer_hyperparameters(controller.model.optimizer)
        step = controller.restore(
            *(self.run_dir / folder for folder in SAVE_FOLDERS), clean=self.is_chief
        )
        if step:
            resume_check.apply_allowed_changes(self.run_dir, controller.model.optimizer, configured)
        if step and self.is_chief:
            outputs.trim_history(self.output_dir, step // self.steps_per_epoch)
        return step

    def fit(
        self,
        x: Any = None,
        y: Any = None,
        *,
        batch_size: int | None = None,
        epochs: int | None = None,
        verbose: int | None = None,
        callbacks: Sequence[keras.callbacks.Callback] = (),
        validation_split: float = 0.0,
        validation_data: Any = None,
        shuffle: bool | None = None,
        class_weight: dict[int, float] | None = None,
        sample_weight: Any = None,
        initial_epoch: int = 0,
        steps_per_epoch: int | None = None,
        validation_steps: int | None = None,
        validation_batch_size: int | None = None,
        validation_freq: int | None = None,
    ) -> keras.callbacks.History:
        """Train with the kdist engine and write the run's outputs (on the chief).

        The arguments are `model.fit`'s, with its meaning. Without `x` the data is the
        config's (`data.source`), or what an earlier call was given. Data in hand
        (`kdist.data.in_hand`) is read as Keras's data adapters read it: arrays in
        batches of `batch_size`, each epoch ending with its partial batch; a batched
        dataset, a `PyDataset` or a generator by its own batches; each global batch
        cut over the replicas as `tf.distribute` cuts it for `fit`. The one difference:
        shuffled arrays are ordered by `runtime.seed` and the epoch, so a resumed run
        reads the same batches from any step (a dataset is read again from the start of
        the epoch and the steps taken are skipped).

        How long: the first `fit` of an `Experiment` resumes from the run folder's backup
        (if any). `epochs=None` trains until epoch `trainer.epochs` of the run (the
        command line's meaning); `epochs=N` trains `N - initial_epoch` epochs more from
        where the model is, as `model.fit` called again does, and the run's history
        (`history.csv`, `curves.png`) goes on. A call that trains nothing says so.

        Args:
            x: NumPy arrays (or a dict or tuple of them), a `tf.data.Dataset` (of single
                examples, or of batches: each batch is a global batch), a
                `keras.utils.PyDataset` or a generator of batches. Defaults to `None`.
            y: targets of arrays `x`. Defaults to `None`.
            batch_size: the global batch for arrays or single examples
                (`trainer.global_batch_size`). Defaults to `None`: the config's.
            epochs: the epoch to train to, from `initial_epoch`. Defaults to `None`:
                until `trainer.epochs`.
            verbose: 0 silent, 1 progress bar, 2 one line per epoch. Defaults to `None`:
                `trainer.verbose` (0 on workers other than the chief).
            callbacks: more Keras callbacks, after the configured ones. Defaults to `()`.
            validation_split: the last fraction of arrays `x`, `y` kept for validation
                (before shuffling). Defaults to `0.0`.
            validation_data: `(x_val, y_val[, sample_weight_val])`, a `tf.data.Dataset`
                or a `PyDataset`. Defaults to `None`.
            shuffle: a new order every epoch (`data.shuffle`): of the arrays'
                examples (and of a dataset of single examples), of a `PyDataset`'s
                batches, as in Keras; a batched dataset and a generator are read in
                their own order. Defaults to `None`: `True` for data in hand, the
                config's otherwise.
            class_weight: `{class id: weight}`: arrays get per-example weights by
                Keras's rule (not with `sample_weight`, as in Keras), other data is
                weighted batch by batch (`trainer.class_weight`). Defaults to `None`.
            sample_weight: per-example weights of arrays `x`. Defaults to `None`.
            initial_epoch: with `epochs`, trains epochs `initial_epoch .. epochs - 1`,
                numbered so for the callbacks and the `History`, as in Keras. Defaults
                to `0`: the epochs go on from the run's (the history goes on).
            steps_per_epoch: steps per epoch (`trainer.steps_per_epoch`); needed for a
                generator. Defaults to `None`: one pass over the data.
            validation_steps: batches each validation reads, from the start of the
                validation data (needed for one without end). Defaults to `None`: all.
            validation_batch_size: not supported: validation reads batches of the
                training batch size. Defaults to `None`.
            validation_freq: validate after the epochs Keras's rule picks
                (`(epoch + 1) % validation_freq == 0`, no extra last validation).
                Defaults to `None`: the config's (which also validates the last epoch).

        Returns:
            The `keras.callbacks.History` of this call's epochs.

        Raises:
            ConfigError: naming the argument (or key), for data that does not fit the
                model or the strategy, before any training.
        """
        arguments = FitArguments(
            x,
            y,
            batch_size=batch_size,
            epochs=epochs,
            verbose=verbose,
            callbacks=callbacks,
            validation_split=validation_split,
            validation_data=validation_data,
            shuffle=shuffle,
            class_weight=class_weight,
            sample_weight=sample_weight,
            initial_epoch=initial_epoch,
            steps_per_epoch=steps_per_epoch,
            validation_steps=validation_steps,
            validation_batch_size=validation_batch_size,
            validation_freq=validation_freq,
        )
        self._use_data(
            read_fit_data(
                arguments,
                strategy=self.strategy,
                configured=self._configured,
                previous=self._given_args,
                fitted_batch=int(self.cfg.trainer.global_batch_size) if self._fitted else None,
            )
        )
        controller = self._controller()
        if self._given is not None and self.source.size("validation"):
            # Before the first epoch, not after it (Keras fails there, after training).
            spec = self.source.dataset("validation").element_spec
            check_inputs(controller.model, spec, key="validation_data")
        if verbose is None:
            verbose = int(self.cfg.trainer.verbose) if self.is_chief else 0
        # A notebook may change `trainer.epochs` between two `fit` calls.
        controller.schedule = batch_plan.schedule(self.cfg.trainer, self.steps_per_epoch)
        if validation_freq is not None:  # Keras's rule alone (`Schedule.validate_last`)
            controller.schedule = dataclasses.replace(controller.schedule, validate_last=False)
        resumed = False
        if not self._fitted:
            if self.cfg.callbacks.backup.enabled:
                resumed = self.restore() > 0
                warn_stream_resume(self._given, self.steps_per_epoch, controller.global_step)
            else:
                controller.global_step = 0
        if epochs is not None:
            if initial_epoch and not resumed:  # Keras's numbers: initial_epoch .. epochs - 1
                controller.start_at_epoch(int(initial_epoch))
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
                else f"trainer.epochs={self.cfg.trainer.epochs} is reached",
                "pass epochs=N to train N epochs more",
            )
        run = build_run(
            self.cfg,
            controller=controller,
            strategy=self.strategy,
            run_dir=self.run_dir,
            output_dir=self.output_dir,
            is_chief=self.is_chief,
            directions=metric_directions(self.model),
            extra=callbacks,
            verbose=verbose,
        )
        self.best_model = run.best_model
        started = time.perf_counter()
        self._fitted = True
        self.result = controller.fit(run.callbacks, savers=run.savers, verbose=verbose)
        summary = self.metrics() | {"wall_seconds": time.perf_counter() - started}
        outputs.write(
            self.output_dir,
            self.run_dir,
            run,
            metrics=summary,
            cfg=self.cfg,
            model=controller.model,
        )
        return self.result.history

    def _use_data(self, found: FitData | None) -> None:
        """Make `fit`'s data (`read_fit_data`) the run's: `self.source` and the config keys."""
        if found is None:
            return  # the data of the last call (or the config's), or the same again
        given, args = found.given, found.args
        cfg = self.cfg
        for key, value in found.keys.items():
            set_key(cfg, key, value)
        batch = batch_plan.global_batch_size(cfg, self.num_replicas)
        source = given.source if given is not None else self.source
        per_epoch = cfg.trainer.get("steps_per_epoch")
        self.steps_per_epoch = steps_per_epoch_of(source, batch, per_epoch)
        self.source, self._given, self._given_args = source, given or self._given, args
        self.validates = bool(cfg.trainer.validation) and source.size("validation") > 0
        self._bound = None  # the runner reads the data anew (the pipeline's keys changed)
        if given is not None:
            log.info("%s; %d steps per epoch", given.describe(), self.steps_per_epoch)

    def evaluate(
        self,
        x: Any = None,
        y: Any = None,
        *,
        batch_size: int | None = None,
        verbose: Any = "auto",
        sample_weight: Any = None,
        steps: int | None = None,
        callbacks: Sequence[keras.callbacks.Callback] | None = None,
        return_dict: bool | None = None,
    ) -> Any:
        """Evaluate the model under the run's strategy, as `model.evaluate` does.

        Without `x`, the run's validation split (the config's data, or the data given
        to `fit`), returned as a dict (kdist's run-folder form). With `x`, the data as
        `model.evaluate` reads it (`kdist.data.in_hand.given_batches`: arrays in batches of
        `batch_size`, the last one partial), each batch cut over the replicas as
        `tf.distribute` cuts it for Keras.

        Args:
            x: arrays (or a dict or list of them), a `tf.data.Dataset`, a
                `keras.utils.PyDataset` or a generator. Defaults to `None`: the
                validation split.
            y: targets of arrays `x`. Defaults to `None`.
            batch_size: rows per batch of arrays. Defaults to `None`: 32, as in Keras.
            verbose: accepted for `model.evaluate`'s signature; kdist shows no
                progress bar here. Defaults to `"auto"`.
            sample_weight: per-example weights of arrays `x`. Defaults to `None`.
            steps: batches to read. Defaults to `None`: all.
            callbacks: Keras callbacks; their `on_test_begin`/`on_test_end` run.
                Defaults to `None`.
            return_dict: a dict `{metric: value}` when true; when false, Keras's form
                (one value alone, else a list in the model's metrics' order).
                Defaults to `None`: false with `x` (Keras's default), true without.

        Returns:
            The metrics, as `return_dict` says.

        Raises:
            ConfigError: naming the argument, for data the model cannot take.
        """
        del verbose  # no progress bar: one compiled loop over the batches
        if x is None:
            for name, value in (("y", y), ("sample_weight", sample_weight)):
                if value is not None:
                    raise ConfigError(name, "needs x: give the data it goes with")
        controller = self._controller()
        model = controller.model
        callback_list = keras.callbacks.CallbackList(list(callbacks or ()), model=model)
        callback_list.on_test_begin()
        if x is None:
            logs = controller.runner.evaluate()
        else:
            batches = given_batches(
                x, y, sample_weight=sample_weight, batch_size=batch_size, steps=steps
            )
            check_inputs(model, _unbatched_spec(batches), key="x")
            logs = evaluate_batches(self.strategy, controller.runner, batches)
        callback_list.on_test_end(logs)
        return keras_return(
            model, logs, return_dict=x is None if return_dict is None else return_dict
        )

    def predict(
        self,
        x: Any = None,
        *,
        batch_size: int | None = None,
        verbose: Any = "auto",
        steps: int | None = None,
        callbacks: Sequence[keras.callbacks.Callback] | None = None,
        split: str = "validation",
    ) -> Any:
        """Predict with the model under the run's strategy, as `model.predict` does.

        Args:
            x: features (arrays, or a dict or list of them; a `tf.data.Dataset`, a
                `keras.utils.PyDataset` or a generator), read as `model.predict`
                reads them. Defaults to `None`: the examples of `split`.
            batch_size: rows per batch of arrays. Defaults to `None`: 32 (Keras's)
                for `x`, the run's global batch for a split.
            verbose: accepted for `model.predict`'s signature; no progress bar.
                Defaults to `"auto"`.
            steps: batches to read. Defaults to `None`: all.
            callbacks: Keras callbacks; their `on_predict_begin`/`on_predict_end` run.
                Defaults to `None`.
            split: without `x`, `"validation"` or `"train"`: the split's examples,
                read once in order. Defaults to `"validation"`.

        Returns:
            NumPy arrays with the structure of the model's outputs, one row per example.

        Raises:
            ConfigError: naming the argument, for data the model cannot take.
        """
        del verbose
        if isinstance(x, str):  # the older form `predict("train")`
            x, split = None, x
        model = self._controller().model
        callback_list = keras.callbacks.CallbackList(list(callbacks or ()), model=model)
        callback_list.on_predict_begin()
        if x is None:
            outputs = predict_split(
                self.strategy,
                model,
                self.source,
                batch_size=int(batch_size or self.cfg.trainer.global_batch_size),
                split=split,
            )
        else:
            batches = given_batches(x, batch_size=batch_size, steps=steps)
            check_inputs(model, _unbatched_spec(batches), key="x", needs_targets=False)
            outputs = predict_dataset(self.strategy, model, batches)
        callback_list.on_predict_end()
        return outputs

    def objective(self) -> float:
        """The value of `objective.name` after `fit`: what sweeps and the tuner optimise."""
        if self.result is None:
            raise RuntimeError("`objective()` needs a finished `fit()`.")
        return float(self.result.final_logs[str(self.cfg.objective.name)])

    def metrics(self) -> dict[str, Any]:
        """The summary written to `metrics.json` after `fit`."""
        if self.result is None or self.model is None:
            raise RuntimeError("`metrics()` needs a finished `fit()`.")
        return outputs.summary(
            self.result,
            self.cfg,
            steps=optimizer_steps(self.model),
            strategy_name=type(self.strategy).__name__,
            num_replicas=self.num_replicas,
        )


def _unbatched_spec(batches: tf.data.Dataset) -> Any:
    """One example's spec of a dataset of batches (the batch axis dropped)."""
    return tf.nest.map_structure(
        lambda spec: tf.TensorSpec(spec.shape[1:], spec.dtype), batches.element_spec
    )
