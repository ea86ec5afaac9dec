"""`Experiment`: one training job, the same from the command line and from a notebook.

It assembles a run, one call per step: config -> runtime -> strategy -> data -> model ->
runner -> controller. The controller (`kdist.engine.controller`) runs it; the callbacks
come from `kdist.callbacks.factory`; the files it leaves come from `kdist.experiment.outputs`.
It is made of parts, each a module of functions it hands what they need: its setup
(`kdist.run_setup.RunSetup`), the binding of the model, data and compile into a runner
and a controller (`kdist.experiment.binding`), the parts of a `fit` call
(`kdist.experiment.fit_call`), the resume of a run folder (`kdist.experiment.resuming`),
evaluate/predict and summaries (`kdist.experiment.results`).
"""

from __future__ import annotations

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
from kdist.cluster import chief
from kdist.data.in_hand import Given
from kdist.data.in_hand.raised import data_errors
from kdist.data.source import Source
from kdist.engine import Controller, FitResult, Runner
from kdist.experiment import binding, fit_call, results, resuming, run_data
from kdist.experiment.binding import CompileWatch, StepSettings, eager_if
from kdist.experiment.fit_arguments import FitArguments, keras_limits
from kdist.experiment.run_data import BuiltAtFirstUse, DataPlan
from kdist.process import runtime
from kdist.run_setup import RunSetup, setup_run
from kdist.runs import lock as run_lock
from kdist.runs.layout import default_run_dir

__all__ = ["Experiment"]

log = logging.getLogger(__name__)


class Experiment:
    """Set up devices, seeds, precision and the strategy for a config, then train it.

    Creating an `Experiment` validates the config, applies `runtime`, builds the strategy
    and checks that the global batch splits evenly over the replicas; each problem raises
    `ConfigError` naming the key before any training. The config's data source is built
    at its first use (`kdist.experiment.run_data`): never when every call brings its data.

    Args:
        cfg: a composed train config (`kdist.compose(...)` or a Hydra app's).
        run_dir: where outputs go. Defaults to `None`: `cfg.run_dir` if set, else a new
            `outputs/<date>/<time>` folder.
        setup: `cfg`'s setup, made once (`kdist.run_setup.setup_run`; `kdist train`
            makes it before Hydra starts the job). Defaults to `None`: made here.

    Example:

    ```python
    cfg = kdist.compose(["model=cnn", "strategy=mirrored", "runtime.logical_devices=2"])
    exp = kdist.Experiment(cfg)
    model = exp.build_model()
    history = exp.fit()
    exp.evaluate()
    ```
    """

    # The config's data, made when first read unless data given to a call came first.
    source = BuiltAtFirstUse(run_data.config_source)
    steps_per_epoch = BuiltAtFirstUse(run_data.config_steps_per_epoch)
    validates = BuiltAtFirstUse(run_data.config_validates)

    def __init__(
        self, cfg: DictConfig, *, run_dir: str | Path | None = None, setup: RunSetup | None = None
    ):
        if setup is None:
            setup = setup_run(cfg)  # a notebook's: validated, objective and cluster resolved
        elif setup.cfg is not cfg:
            raise ValueError("Experiment(cfg, setup=...): setup.cfg must be cfg")
        self.setup = setup
        self.cfg = cfg
        self.run_dir = Path(run_dir or cfg.get("run_dir") or default_run_dir(microseconds=True))
        runtime.setup(cfg.runtime)
        self.strategy: tf.distribute.Strategy = strategies.build(cfg.strategy, setup.cluster)
        self.num_replicas = int(self.strategy.num_replicas_in_sync)
        self.is_chief = chief.is_chief(self.strategy)
        batch = run_data.global_batch_size(cfg, self.num_replicas)
        # How the run reads its data: the config's, until a `fit` call gives its own
        # arguments over it (`kdist.experiment.fit_call.use_data`); no key is written.
        self._configured = DataPlan.of_config(cfg)
        self.plan = self._configured
        self.output_dir = chief.writable_dir(self.run_dir, self.strategy)
        # The objective and the monitors are checked against what the model logs once it
        # is built (`build_model`): a user's model (from a notebook or `model._target_`)
        # logs its own metrics, whatever the config's `trainer.metrics` say.
        self.model: keras.Model | None = None
        self.optimizer: keras.optimizers.Optimizer | None = None
        self.runner: Runner | None = None
        self.controller: Controller | None = None
        self.result: FitResult | None = None
        self.best_model: BestModelExport | None = None
        # Data given to `fit` (`kdist.data.in_hand`), the arguments that made it, and
        # the source the runner reads. After a first `fit`, later ones go on from the
        # model as it is.
        self._given: Given | None = None
        self._given_args: tuple[Any, ...] = ()
        self._bound: Source | None = None
        self._model_from_config = False
        self._own_compile = False
        # The compile kdist's step was built for: a recompile rebuilds it, as Keras's
        # `compile` drops its `train_function`; the step settings it was built with.
        self._watch = CompileWatch()
        self._settings = StepSettings.of_config(cfg)
        self._fitted = False
        log.info(
            "strategy %s with %d replica(s); global batch %d",
            type(self.strategy).__name__,
            self.num_replicas,
            batch,
        )

    def build_model(self, model: keras.Model | None = None) -> keras.Model:
        """Build the model, optimizer, loss, metrics, runner and controller for training.

        Args:
            model: a model to use instead of building `cfg.model`. Defaults to `None`.
                When it is already compiled (e.g. in a notebook), its compile is kept:
                its loss, loss weights, metrics and optimizer (with its configuration)
                replace `trainer.loss`, `trainer.metrics` and `optimizer`. On one
                device a model made outside `strategy.scope()` trains as it is, as
                `model.fit` trains it (a `keras.Layer` with Keras's `Trainer` too, with
                no `model.keras`). One made in the scope of a single-host strategy
                trains under that strategy, as `fit` trains it. Under another
                distributed strategy it is rebuilt in the scope from its config, with
                its weights and compile configuration (the optimizer restarts from its
                configuration, without slots): train `exp.model` then. A model whose
                layers build on their first call is built by `fit`, on the first batch
                of the data it is given, in the scope.

        Returns:
            The compiled `keras.Model` (compiled so that `model.keras` reloads), built
            unless its layers build on their first call (then `fit` builds it).

        Raises:
            ConfigError: naming the key, for a loss, metric, target or objective that
                the model or the data cannot take (`kdist.modeling`, `kdist.config.objective`).
        """
        return binding.build_model(self, model)

    def _controller(self) -> Controller:
        return binding.controller_of(self)  # Keras: `self.make_train_function()`

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
        where the model is, numbered `initial_epoch .. N - 1` for the callbacks and the
        `History`, as `model.fit` called again does; the run's history (`history.csv`,
        `curves.png`) goes on counting the run's epochs. A call that trains nothing says so.

        Args:
            x: NumPy arrays (or a dict or tuple of them), a `tf.data.Dataset` (of single
                examples, or of batches: each batch is a global batch), a
                `keras.utils.PyDataset` or a generator of batches. Defaults to `None`.
            y: targets of arrays `x`. Defaults to `None`.
            batch_size: the global batch for arrays or single examples
                (`trainer.global_batch_size`). Defaults to `None`: 32 for arrays and a
                model the user compiled (Keras's), else the config's.
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
                numbered so for the callbacks and the `History`, as in Keras (a later
                `fit` too; the run's `history.csv` goes on counting). Defaults to `0`.
            steps_per_epoch: steps per epoch (`trainer.steps_per_epoch`); beyond the
                batches of data with an end, an epoch ends where the data does, as in
                Keras. Defaults to `None`: one pass over the data (a generator's: read
                to its end before training).
            validation_steps: batches each validation reads, from the start of the
                validation data (needed for one without end). Defaults to `None`: all.
            validation_batch_size: examples per validation batch
                (`trainer.validation_batch_size`). Defaults to `None`: as Keras's `fit`,
                `batch_size`, or 32 for validation arrays beside data that brings its
                own batches, else the training batch.
            validation_freq: validate after the epochs Keras's rule picks
                (`(epoch + 1) % validation_freq == 0`, no extra last validation).
                Defaults to `None`: the config's (which also validates the last epoch).

        Returns:
            The `keras.callbacks.History` of this call's epochs.

        Raises:
            ConfigError: naming the argument (or key), for data that does not fit the
                model or the strategy, before any training.
        """
        with run_lock.owned_by(self.run_dir, chief=self.is_chief):  # one owner per folder
            epochs, steps_per_epoch = keras_limits(epochs, steps_per_epoch)
            batch_size = fit_call.keras_batch_size(self, x, batch_size)
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
            # Keras: `epoch_iterator = TFEpochIterator(...)`: the data as its adapters read it.
            fit_call.use_data(self, fit_call.read_data(self, arguments, callbacks))
            controller = self._controller()  # Keras: `self.make_train_function()`
            fit_call.check_validation(self, controller)
            if verbose is None:
                verbose = int(self.cfg.trainer.verbose) if self.is_chief else 0
            fit_call.schedule_call(self, controller, arguments)
            resumed = fit_call.resumes(self) and self.restore() > 0  # kdist's: the backup
            fit_call.plan_epochs(self, controller, arguments, resumed=resumed)
            # Keras: `callbacks = callbacks_module.CallbackList(...)`: the run's, then the user's.
            run = fit_call.run_callbacks(self, controller, callbacks, verbose)
            started = time.perf_counter()
            self._fitted = True
            with data_errors(), eager_if(self._settings.run_eagerly):
                # data_errors: what a PyDataset or generator raised, as its one line
                self.result = controller.fit(run.callbacks, savers=run.savers, verbose=verbose)
            # `use_ema`: the controller ends with `finalize_variable_values`, as Keras's `fit`.
            fit_call.write_outputs(self, run, started)  # kdist's addition: the run's files
            return self.result.history

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
        recorded = self.plan.recorded(self.cfg)  # with `fit`'s data arguments
        if not self.setup.resumed_in(self.run_dir):
            # The command line's resume check (made there before the job, under the
            # folder's lock), before this run's config is written over the folder's.
            self.setup = self.setup.checked_in(self.run_dir, recorded)
        return resuming.restore(
            self._controller(),
            self.setup,
            self.run_dir,
            self.output_dir,
            is_chief=self.is_chief,
            recorded=recorded,
        )

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
            callbacks: Keras callbacks; their `on_test_begin`/`on_test_end` run, and
                without `x` their test-batch hooks too, as in `model.evaluate`.
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
        results.check_without_x(x, y=y, sample_weight=sample_weight)
        model, runner = binding.model_for(self, x)
        return results.evaluate(
            model,
            runner,
            self.strategy,
            x,
            y,
            batch_size=batch_size,
            sample_weight=sample_weight,
            steps=steps,
            callbacks=callbacks,
            return_dict=return_dict,
            run_eagerly=self._settings.run_eagerly,
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
            callbacks: Keras callbacks; their `on_predict_begin`/`on_predict_end` run,
                and with `x` their predict-batch hooks too, as in `model.predict`.
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
        model, _ = binding.model_for(self, x)
        if x is None:
            batch_size = int(batch_size or self.plan.global_batch_size)
        return results.predict(
            model,
            self.strategy,
            self.source if x is None else None,
            x,
            batch_size=batch_size,
            steps=steps,
            callbacks=callbacks,
            split=split,
            run_eagerly=self._settings.run_eagerly,
        )

    def objective(self) -> float:
        """The value of `objective.name` after `fit`: what sweeps and the tuner optimise."""
        return results.objective(self.result, self.cfg)

    def metrics(self) -> dict[str, Any]:
        """The summary written to `metrics.json` after `fit`."""
        return results.metrics(
            self.result,
            self.cfg,
            self.model,
            self.strategy,
            self.num_replicas,
            global_batch_size=self.plan.global_batch_size,
        )
