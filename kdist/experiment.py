"""`Experiment`: one training job, the same from the command line and from a notebook.

It assembles a run, one call per step: config -> runtime -> strategy -> data -> model ->
runner -> controller. The controller (`kdist.engine.controller`) runs it; the callbacks
come from `kdist.callbacks.factory`; the files it leaves come from `kdist.outputs`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf
from omegaconf import DictConfig

from kdist import batch_plan, outputs, resume_check, runtime, strategies
from kdist.callbacks.best_model import BestModelExport
from kdist.callbacks.factory import build_run
from kdist.cluster import chief
from kdist.config.validate import validate
from kdist.data.pipeline import build_source, run_dataset_fn, steps_per_epoch
from kdist.engine import Controller, FitResult, Runner
from kdist.engine.building import optimizer_steps
from kdist.modeling import check_targets, compiled_model, runner_for
from kdist.objective import check_monitors, check_objective, metric_directions
from kdist.predicting import predict_split
from kdist.run_dir import default_run_dir

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
        self.cfg = cfg
        self.run_dir = Path(run_dir or cfg.get("run_dir") or default_run_dir(microseconds=True))
        runtime.setup(cfg.runtime)
        self.strategy: tf.distribute.Strategy = strategies.build(cfg.strategy)
        self.num_replicas = int(self.strategy.num_replicas_in_sync)
        self.is_chief = chief.is_chief(self.strategy)
        batch = batch_plan.global_batch_size(cfg, self.num_replicas)
        self.source = build_source(cfg.data.source)
        per_epoch = cfg.trainer.get("steps_per_epoch")
        self.steps_per_epoch = steps_per_epoch(self.source, batch, per_epoch)
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
                outside `strategy.scope()` under a distributed strategy is rebuilt in
                the scope from its config, with its weights and compile configuration
                (the optimizer restarts from its configuration, without slots).

        Returns:
            The compiled, built `keras.Model` (compiled so that `model.keras` reloads).

        Raises:
            ConfigError: naming the key, for a loss, metric, target or objective that
                the model or the data cannot take (`kdist.modeling`, `kdist.objective`).
        """
        cfg = self.cfg
        check_targets(cfg.trainer, self.source)
        schedule = batch_plan.schedule(cfg.trainer, self.steps_per_epoch)
        model = compiled_model(
            cfg, self.strategy, self.source, total_steps=schedule.total_steps, model=model
        )
        self.runner = runner_for(
            cfg, self.strategy, model, self.source, schedule, validates=self.validates
        )
        self._check_objective(model)
        self.model, self.optimizer = model, model.optimizer
        if self.is_chief:  # the config as resolved (batch, objective), before training
            outputs.write_config(self.output_dir, cfg)
        self.controller = Controller(
            self.runner,
            model=model,
            schedule=schedule,
            train_data=functools.partial(run_dataset_fn, cfg, self.source, "train"),
            strategy_name=type(self.strategy).__name__,
            num_replicas=self.num_replicas,
        )
        return model

    def _controller(self) -> Controller:
        if self.controller is None:  # `build_model` makes it
            self.build_model()
        assert self.controller is not None
        return self.controller

    def restore(self) -> int:
        """Resume from `<run_dir>/backup` (else `checkpoints/`): `Controller.restore`.

        Returns:
            The global step to continue from (0 when there is nothing to restore).
        """
        controller = self._controller()
        # A change allowed on resume is applied after the restore (`kdist.resume_check`).
        configured = resume_check.optimizer_hyperparameters(controller.model.optimizer)
        step = controller.restore(
            self.run_dir / "backup", self.run_dir / "checkpoints", clean=self.is_chief
        )
        if step:
            resume_check.apply_allowed_changes(self.run_dir, controller.model.optimizer, configured)
        if step and self.is_chief:
            outputs.trim_history(self.output_dir, step // self.steps_per_epoch)
        return step

    def fit(
        self, callbacks: Sequence[keras.callbacks.Callback] = (), *, verbose: int | None = None
    ) -> keras.callbacks.History:
        """Train with the kdist engine and write the run's outputs (on the chief).

        Args:
            callbacks: more Keras callbacks, after the configured ones. Defaults to `()`.
            verbose: 0 silent, 1 progress bar, 2 one line per epoch. Defaults to `None`:
                `trainer.verbose` (0 on workers other than the chief).

        Returns:
            The `keras.callbacks.History` of the run.
        """
        controller = self._controller()
        if verbose is None:
            verbose = int(self.cfg.trainer.verbose) if self.is_chief else 0
        # A notebook may change `trainer.epochs` between two `fit` calls.
        controller.schedule = batch_plan.schedule(self.cfg.trainer, self.steps_per_epoch)
        if self.cfg.callbacks.backup.enabled:
            self.restore()
        else:
            controller.global_step = 0  # without backups every `fit` starts afresh
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

    def evaluate(self) -> dict[str, float]:
        """Run the validation split once and return its metrics (`loss`, `accuracy`, ...)."""
        return self._controller().runner.evaluate()

    def predict(self, split: str = "validation", *, x: Any = None) -> Any:
        """Predict with the model under the run's strategy, in the data's order.

        Args:
            split: `"validation"` or `"train"`: the split's examples, read once in
                order through the run's input pipeline. Defaults to `"validation"`.
            x: features to predict on instead of a split (NumPy arrays, or a dict of
                them for several inputs). Defaults to `None`.

        Returns:
            NumPy arrays with the structure of the model's outputs, one row per example.
        """
        return predict_split(
            self.strategy,
            self._controller().model,
            self.source,
            batch_size=int(self.cfg.trainer.global_batch_size),
            split=split,
            x=x,
        )

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
