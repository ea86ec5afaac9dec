"""`Experiment`: one training job, the same from the command line and from a notebook."""

from __future__ import annotations

import csv
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from kdist import callbacks as kdist_callbacks
from kdist import models, optimizers, runtime, strategies
from kdist.callbacks.best_model import BestModelExport, save_model_files
from kdist.callbacks.checkpoint import (
    PeriodicCheckpoint,
    TrainingState,
    clean_leftovers,
    describe_resume,
    restore_latest,
    resume_point,
)
from kdist.callbacks.curves import Curves
from kdist.callbacks.factory import monitor_mode
from kdist.callbacks.guards import NonFiniteGuard
from kdist.callbacks.preemption import PreemptionSave
from kdist.callbacks.progress import ProgressBar
from kdist.cluster import chief
from kdist.compiling import (
    build_loss,
    build_loss_weights,
    build_metrics,
    check_class_weight,
    check_output_names,
    configured_metric_names,
    direction_of,
    is_sparse_classification_loss,
    loss_names,
)
from kdist.config.build import instantiate
from kdist.config.errors import ConfigError
from kdist.config.validate import validate
from kdist.data import Source, make_dataset_fn, steps_per_epoch
from kdist.data.checks import check_label_range
from kdist.data.source import ArraySource
from kdist.engine import FitResult, Runner, StandardRunner, build_for_training
from kdist.engine import fit as engine_fit
from kdist.engine.building import rebuild_in_scope, synchronize_batchnorm
from kdist.engine.ps_runner import ParameterServerRunner
from kdist.engine.sharded import savable_model
from kdist.predicting import predict_dataset
from kdist.run_dir import default_run_dir

__all__ = ["Experiment"]

log = logging.getLogger(__name__)


def _close_files(callbacks: Sequence[keras.callbacks.Callback]) -> None:
    """Close the files Keras callbacks keep open until `on_train_end`, after a failure
    (which skips that hook) has stopped training."""
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.CSVLogger) and callback.csv_file is not None:
            callback.csv_file.close()
        if isinstance(callback, keras.callbacks.TensorBoard):
            callback._close_writers()


def _default_run_dir() -> Path:
    return default_run_dir(microseconds=True)


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
        validate(cfg)
        self.cfg = cfg
        self.run_dir = Path(run_dir or cfg.get("run_dir") or _default_run_dir())
        runtime.setup(cfg.runtime)
        self.strategy: tf.distribute.Strategy = strategies.build(cfg.strategy)
        self.num_replicas = int(self.strategy.num_replicas_in_sync)
        batch = self._resolve_batch_size()
        if batch % self.num_replicas:
            lower = max(self.num_replicas, batch - batch % self.num_replicas)
            raise ConfigError(
                "trainer.global_batch_size",
                f"is not divisible by the {self.num_replicas} replicas",
                value=batch,
                hint=f"use a multiple of {self.num_replicas}, e.g. {lower}",
            )
        accumulate = int(cfg.trainer.get("accumulate_steps", 1))
        if accumulate > 1 and batch % (accumulate * self.num_replicas):
            raise ConfigError(
                "trainer.accumulate_steps",
                f"does not split the global batch of {batch} into micro-batches that the "
                f"{self.num_replicas} replica(s) share evenly",
                value=accumulate,
                hint=f"make trainer.global_batch_size a multiple of {accumulate} x "
                f"{self.num_replicas} = {accumulate * self.num_replicas}",
            )
        self.source = self._build_source()
        self.steps_per_epoch = steps_per_epoch(
            self.source, batch, cfg.trainer.get("steps_per_epoch")
        )
        self.output_dir = chief.writable_dir(self.run_dir, self.strategy)
        names = configured_metric_names(cfg.trainer)
        if names is not None and not self._objective_auto:
            # Checked again, and warned about, once the model is built.
            self._check_objective(names, warn=False)
        self.cluster_strategy = isinstance(
            self.strategy,
            (
                tf.distribute.MultiWorkerMirroredStrategy,
                tf.distribute.ParameterServerStrategy,
            ),
        )
        self.model: keras.Model | None = None
        self.optimizer: keras.optimizers.Optimizer | None = None
        self.runner: Runner | None = None
        self.result: FitResult | None = None
        self.best_model: BestModelExport | None = None
        log.info(
            "strategy %s with %d replica(s); %d steps per epoch of global batch %d",
            type(self.strategy).__name__,
            self.num_replicas,
            self.steps_per_epoch,
            batch,
        )

    def _resolve_batch_size(self) -> int:
        """The global batch; `per_replica_batch_size` is written into the config as it.

        Every later reader (data, checkpoints, metrics.json) sees `global_batch_size`.
        """
        trainer = self.cfg.trainer
        per_replica = trainer.get("per_replica_batch_size")
        if per_replica is not None:
            with read_write(trainer), open_dict(trainer):
                trainer.global_batch_size = int(per_replica) * self.num_replicas
            log.info(
                "global batch %d = trainer.per_replica_batch_size %d x %d replica(s)",
                trainer.global_batch_size,
                per_replica,
                self.num_replicas,
            )
        elif self.num_replicas > 1 and self.cfg.optimizer.get("lr_scaling", "none") != "none":
            log.warning(
                "optimizer.lr_scaling=%s scales the learning rate by the %d replicas, but "
                "trainer.global_batch_size=%d stays fixed; set trainer.per_replica_batch_size "
                "(with trainer.global_batch_size=null) so the batch grows with them, or "
                "optimizer.lr_scaling=none",
                self.cfg.optimizer.lr_scaling,
                self.num_replicas,
                trainer.global_batch_size,
            )
        return int(trainer.global_batch_size)

    # -- building ------------------------------------------------------------------------

    def _build_source(self) -> Source:
        source = instantiate(self.cfg.data.source, _convert_="all")
        if not isinstance(source, Source):
            raise ConfigError(
                "data.source._target_",
                f"returned {type(source).__name__}, not a kdist.data.Source",
                value=self.cfg.data.source.get("_target_"),
            )
        return source

    def _directions(self) -> dict[str, str]:
        """`min`/`max` of each metric the run logs, from the metrics' own `_direction`."""
        directions = {"loss": "min"}
        if self.model is None:
            return directions
        pending = list(self.model.metrics)
        while pending:
            metric = pending.pop()
            # CompileMetrics holds the compiled metrics (per output) inside it.
            pending.extend(getattr(metric, "_flat_metrics", None) or [])
            direction = getattr(metric, "_direction", None)
            if direction in ("up", "down"):
                directions[metric.name] = "max" if direction == "up" else "min"
        return directions

    def _check_objective(self, logged: Sequence[str], *, warn: bool = True) -> None:
        """`objective.name` must be something this run logs (checked once the model is built)."""
        objective = self.cfg.get("objective")
        if objective is None:
            return
        validates = bool(self.cfg.trainer.validation) and self.source.size("validation") > 0
        if self._objective_auto and objective.name.removeprefix("val_") not in logged:
            # A model compiled by the user logs its own metrics: pick from those.
            name = "accuracy" if "accuracy" in logged else "loss"
            objective.name = f"val_{name}" if validates else name
            objective.direction = direction_of(name)
        if objective.name not in [*logged, *(f"val_{name}" for name in logged)]:
            raise ConfigError(
                "objective.name",
                "is not a metric of this run",
                value=objective.name,
                hint=f"use one of: {', '.join(logged)} (val_<name> for validation)",
            )
        if warn and str(objective.name).startswith("val_") and not validates:
            # Training still makes sense; sweeps and the tuner get no value (the tuner stops).
            log.warning("objective %s needs validation, which this run has not", objective.name)

    def _dataset_fn(self, split: str, skip_examples: int = 0) -> Any:
        batch = int(self.cfg.trainer.global_batch_size)
        if split == "train":
            # Training batches are micro-batches when updates accumulate several.
            batch //= int(self.cfg.trainer.get("accumulate_steps", 1))
        return make_dataset_fn(
            self.source,
            split,
            self.cfg.data,
            global_batch_size=batch,
            seed=int(self.cfg.runtime.seed),
            skip_examples=skip_examples,
            class_weight=check_class_weight(self.cfg.trainer.get("class_weight"))
            if split == "train"
            else None,
        )

    def _check_targets(self) -> None:
        """Classification losses need class ids (or one-hot rows): say so before training."""
        loss = self.cfg.trainer.get("loss")
        if not is_sparse_classification_loss(loss) or not isinstance(self.source, ArraySource):
            return
        targets = self.source.arrays("train")[1]
        if isinstance(targets, dict):
            return
        if not np.issubdtype(targets.dtype, np.integer):
            raise ConfigError(
                "trainer.loss",
                f"needs integer class ids, but the targets are {targets.dtype}",
                value=loss_names(loss)[0],
                hint="for float targets use a regression loss, e.g. trainer.loss=mse "
                "trainer.metrics=[mae]",
            )
        # Class ids the model has no output for fail late, inside TensorFlow.
        for split in ("train", "validation"):
            check_label_range("data.source", self.source.arrays(split)[1], self.source.num_classes)

    def _synchronize_batchnorm(self, model: keras.Model) -> None:
        if isinstance(self.strategy, tf.distribute.ParameterServerStrategy):
            raise ConfigError(
                "trainer.sync_batchnorm",
                "cannot work under parameter_server: workers train on their own batches, "
                "asynchronously, with no global batch to share statistics over",
                value=True,
                hint="set trainer.sync_batchnorm=false, or use mirrored or multi_worker_mirrored",
            )
        count = synchronize_batchnorm(model)
        log.info(
            "trainer.sync_batchnorm: %d BatchNormalization layer(s) use the statistics of "
            "the global batch over %d replica(s)",
            count,
            self.num_replicas,
        )

    def build_model(self, model: keras.Model | None = None) -> keras.Model:
        """Build the model, optimizer, loss and metrics inside `strategy.scope()`.

        Models that create their variables on the first call (subclassed models, layers
        without an input shape) are built here from the data's element spec, before the
        optimizer, as `fit` does.

        Args:
            model: a model to use instead of building `cfg.model`. Defaults to `None`.
                When it is already compiled (e.g. in a notebook), its compile is kept:
                its loss, loss weights, metrics and optimizer (with its configuration)
                replace `trainer.loss`, `trainer.metrics` and `optimizer`. A model made
                outside `strategy.scope()` under a distributed strategy is rebuilt in
                the scope from its config, with its weights and compile configuration
                (the optimizer restarts from its configuration, without slots).

        Returns:
            The compiled, built `keras.Model` (compiled so that `model.keras` reloads
            with its optimizer and loss; training runs through the kdist engine).

        Raises:
            ConfigError: naming the key, for a loss or metric Keras does not know, loss
                keys that are not the model's outputs, targets a classification loss
                cannot take, or an objective the run does not log.
        """
        cfg = self.cfg
        self._check_targets()
        with self.strategy.scope():
            if model is None:
                model = models.from_config(
                    cfg.model,
                    input_shape=self.source.input_shape,
                    num_classes=self.source.num_classes,
                )
            elif getattr(model, "_distribute_strategy", None) is not self.strategy and (
                self.num_replicas > 1 or self.cluster_strategy
            ):
                model = rebuild_in_scope(model)
            if cfg.trainer.get("sync_batchnorm"):
                self._synchronize_batchnorm(model)
            if not model.compiled or model.optimizer is None:
                check_output_names(model, cfg.trainer)
                model.compile(
                    optimizer=optimizers.build(
                        cfg.optimizer,
                        num_replicas=self.num_replicas,
                        mixed_precision=cfg.runtime.mixed_precision,
                        total_steps=int(cfg.trainer.epochs) * self.steps_per_epoch,
                    ),
                    loss=build_loss(cfg.trainer.get("loss")),
                    loss_weights=build_loss_weights(cfg.trainer.get("loss_weights")),
                    metrics=build_metrics(cfg.trainer.get("metrics"), cfg.trainer.get("loss")),
                )
            else:
                log.info("keeping %s's own compile (loss, metrics, optimizer)", model.name)
            train_fn = self._dataset_fn("train")
            build_for_training(model, train_fn(tf.distribute.InputContext()).element_spec)
            validation = bool(cfg.trainer.validation) and self.source.size("validation") > 0
            kwargs: dict[str, Any] = {
                "strategy": self.strategy,
                "model": model,
                "train_dataset_fn": train_fn,
                "validation_dataset_fn": self._dataset_fn("validation") if validation else None,
                "global_batch_size": int(cfg.trainer.global_batch_size),
                "steps_per_execution": int(cfg.trainer.steps_per_execution),
                "jit_compile": bool(cfg.runtime.jit_compile),
                "accumulate_steps": int(cfg.trainer.get("accumulate_steps", 1)),
            }
            try:
                if isinstance(self.strategy, tf.distribute.ParameterServerStrategy):
                    # The chief schedules K-step functions on the workers.
                    self.runner = ParameterServerRunner(
                        steps_per_schedule=int(cfg.strategy.steps_per_schedule), **kwargs
                    )
                else:
                    self.runner = StandardRunner(**kwargs)
            except ValueError as error:
                raise ConfigError("model", str(error), value=type(model).__name__) from None
            self._check_objective(list(model.get_metrics_result()))
        self.model, self.optimizer = model, model.optimizer
        self._make_checkpoint()
        return model

    def _make_checkpoint(self) -> None:
        """The state every checkpoint holds: model, optimizer, running metrics, position."""
        self.state = TrainingState(
            strategy_name=type(self.strategy).__name__,
            num_replicas=self.num_replicas,
            global_batch_size=int(self.cfg.trainer.global_batch_size),
        )
        metrics = tf.Module(name="kdist_running_metrics")
        metrics.variables_list = list(self.runner.metric_variables if self.runner else [])
        self.checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, state=self.state, metrics=metrics
        )

    def restore(self) -> int:
        """Resume from the newest readable backup in `<run_dir>/backup`, if there is one.

        Without one, the newest readable checkpoint in `<run_dir>/checkpoints` (logged).

        The model, optimizer, running metrics and data position are restored; the step is
        mapped onto this run's global batch (logged), so a run can resume under another
        strategy or replica count.

        Returns:
            The global step to continue from (0 when there is no backup).

        Raises:
            kdist.callbacks.checkpoint.CheckpointError: when backups exist but none reads.
        """
        if self.model is None:
            self.build_model()
        if chief.is_chief(self.strategy):
            # An interrupted save (a full disk, a kill) leaves `*_temp*` files behind.
            for folder in ("backup", "checkpoints"):
                clean_leftovers(self.run_dir / folder)
        path = restore_latest(self.checkpoint, self.run_dir / "backup")
        if path is None:
            # backup/ gone (deleted, or never written): the periodic checkpoints still hold
            # a state; starting from step 0 without a word would throw it away.
            path = restore_latest(self.checkpoint, self.run_dir / "checkpoints")
            if path is not None:
                log.warning("no backup in %s: resuming from checkpoint %s", "backup/", path)
        if path is None:
            return 0
        point = resume_point(self.state, path)
        batch = int(self.cfg.trainer.global_batch_size)
        steps = point.examples // batch
        self.state.steps.assign(steps)
        log.info(
            describe_resume(
                point,
                strategy_name=type(self.strategy).__name__,
                replicas=self.num_replicas,
                batch=batch,
                steps_per_epoch=self.steps_per_epoch,
            )
        )
        if chief.is_chief(self.strategy):
            self._trim_history(steps // self.steps_per_epoch)
        assert self.runner is not None
        self.runner.set_train_dataset_fn(self._dataset_fn("train", skip_examples=point.examples))
        return steps

    def _earlier_epochs(self) -> list[dict[str, float]]:
        """The epochs `history.csv` already holds (a resumed run), for `curves.png`."""
        path = self.output_dir / "history.csv"
        if not path.exists():
            return []
        records = []
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                record = {}
                for key, value in row.items():
                    try:
                        record[key] = float(value)
                    except (TypeError, ValueError):
                        continue
                records.append(record)
        return records

    def _trim_history(self, epoch: int) -> None:
        """Drop `history.csv` rows of epochs from `epoch` on: the resumed run redoes them.

        A run stopped inside an epoch still logs that partial epoch; its row would
        otherwise appear twice.
        """
        path = self.output_dir / "history.csv"
        if not path.exists():
            return
        with path.open(newline="") as handle:
            rows = list(csv.reader(handle))
        if not rows:
            return
        kept = [rows[0], *(row for row in rows[1:] if row and int(row[0]) < epoch)]
        if len(kept) != len(rows):
            partial = path.with_suffix(".csv.partial")
            with partial.open("w", newline="") as handle:
                csv.writer(handle).writerows(kept)
            os.replace(partial, path)

    def _fault_tolerance_callbacks(
        self, resume_step: int
    ) -> tuple[list[Any], list[Any], list[Any], list[int]]:
        """The guard, checkpoint, backup, best-model and preemption callbacks."""
        cfg = self.cfg.callbacks
        first: list[keras.callbacks.Callback] = []
        last: list[keras.callbacks.Callback] = []
        listeners: list[Any] = []
        align: list[int] = []
        if cfg.nan_guard:
            guard = NonFiniteGuard()
            first.append(guard)
            listeners.append(guard.set_steps)
        backup: PeriodicCheckpoint | None = None
        for key, folder in (("checkpoint", "checkpoints"), ("backup", "backup")):
            node = cfg[key]
            if not node.enabled:
                continue
            saver = PeriodicCheckpoint(
                checkpoint=self.checkpoint,
                state=self.state,
                directory=self.run_dir / folder,
                every_n_steps=int(node.every_n_steps),
                keep=int(node.keep),
                strategy=self.strategy,
            )
            saver.set_steps(resume_step)
            last.append(saver)
            listeners.append(saver.set_steps)
            align.append(int(node.every_n_steps))
            if key == "backup":
                backup = saver
        if cfg.best_model.monitor:
            mode = monitor_mode(
                str(cfg.best_model.monitor), str(cfg.best_model.mode), self._directions()
            )
            self.best_model = BestModelExport(
                directory=self.output_dir, monitor=str(cfg.best_model.monitor), mode=mode
            )
            last.append(self.best_model)
        if cfg.preemption and backup is not None:
            last.append(
                PreemptionSave(save=backup.save, strategy=self.strategy, run_dir=self.run_dir)
            )
        return first, last, listeners, align

    # -- running -------------------------------------------------------------------------

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
        if self.model is None:
            self.build_model()
        assert self.model is not None and self.runner is not None
        cfg = self.cfg
        if verbose is None:
            verbose = int(cfg.trainer.verbose) if chief.is_chief(self.strategy) else 0
        resume_step = self.restore() if cfg.callbacks.backup.enabled else 0
        total_steps = int(cfg.trainer.epochs) * self.steps_per_epoch
        if resume_step >= total_steps:
            log.info(
                "the backup is at step %d of %d: training is already done", resume_step, total_steps
            )
        first, last, listeners, align = self._fault_tolerance_callbacks(resume_step)
        with self.strategy.scope():
            configured = kdist_callbacks.build(
                cfg.callbacks,
                output_dir=self.output_dir,
                directions=self._directions(),
                resuming=resume_step > 0,
                examples_per_step=int(cfg.trainer.global_batch_size),
            )
        ours: list[keras.callbacks.Callback] = []
        # curves.png on the chief only: other workers' output_dir is a temporary folder.
        if cfg.callbacks.get("curves", True) and chief.is_chief(self.strategy):
            ours.append(
                Curves(
                    path=self.output_dir / "curves.png",
                    history=self._earlier_epochs() if resume_step else [],
                )
            )
        if verbose != 0:
            # Keras adds no bar of its own when a ProgbarLogger is in the list.
            ours.append(ProgressBar(examples_per_step=int(cfg.trainer.global_batch_size)))
        callback_list = keras.callbacks.CallbackList(
            [*first, *configured, *callbacks, *last, *ours],
            add_history=True,
            add_progbar=verbose != 0,
            model=self.model,
            verbose=verbose,
            epochs=int(cfg.trainer.epochs),
            steps=self.steps_per_epoch,
        )
        started = time.perf_counter()
        try:
            self.result = engine_fit(
                self.runner,
                model=self.model,
                callbacks=callback_list,
                epochs=int(cfg.trainer.epochs),
                steps_per_epoch=self.steps_per_epoch,
                steps_per_execution=int(cfg.trainer.steps_per_execution),
                validation_freq=int(cfg.trainer.validation_freq),
                initial_step=resume_step,
                align=align,
                step_listeners=listeners,
            )
        except BaseException as error:
            _close_files(callback_list.callbacks)
            if isinstance(self.runner, ParameterServerRunner):
                # A lost ps surfaces wherever the chief next reads a variable.
                failure = self.runner.ps_failure(error)
                if failure is not None:
                    raise failure from error
            raise
        if not self.result.final_logs:
            # Resumed at the last step: nothing left to train, report the model as it is.
            val = self.runner.evaluate()
            self.result.final_logs = {f"val_{k}": v for k, v in val.items()}
        wall = time.perf_counter() - started
        self._write_outputs(wall)
        return self.result.history

    def evaluate(self) -> dict[str, float]:
        """Run the validation split once and return its metrics (`loss`, `accuracy`, ...)."""
        if self.runner is None:
            self.build_model()
        assert self.runner is not None
        return self.runner.evaluate()

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
        if self.model is None:
            self.build_model()
        assert self.model is not None
        batch = int(self.cfg.trainer.global_batch_size)
        if x is not None:
            dataset = tf.data.Dataset.from_tensor_slices(x).batch(batch)
        else:
            if split not in ("train", "validation"):
                raise ConfigError("split", "must be train or validation", value=split)
            if self.source.size(split) < 1:
                raise ConfigError("data.source", f"has no {split} examples to predict on")
            dataset = self.source.dataset(split).batch(batch)
        return predict_dataset(self.strategy, self.model, dataset)

    # -- outputs -------------------------------------------------------------------------

    def objective(self) -> float:
        """The value of `objective.name` after `fit`: what sweeps and the tuner optimise."""
        if self.result is None:
            raise RuntimeError("`objective()` needs a finished `fit()`.")
        return float(self.result.final_logs[str(self.cfg.objective.name)])

    def metrics(self) -> dict[str, Any]:
        """The summary written to `metrics.json` after `fit`."""
        if self.result is None or self.optimizer is None:
            raise RuntimeError("`metrics()` needs a finished `fit()`.")
        logs = self.result.final_logs
        examples = self.result.steps_run * int(self.cfg.trainer.global_batch_size)
        seconds = max(self.result.train_seconds, 1e-9)
        objective = self.cfg.get("objective") or {"name": "loss", "direction": "min"}
        return {
            "train": {k: v for k, v in logs.items() if not k.startswith("val_")},
            "validation": {k[4:]: v for k, v in logs.items() if k.startswith("val_")},
            "steps": int(self.optimizer.iterations.numpy()),
            "epochs": self.result.epochs_run,
            "examples_per_sec": examples / seconds,
            "strategy": type(self.strategy).__name__,
            "num_replicas": self.num_replicas,
            "global_batch_size": int(self.cfg.trainer.global_batch_size),
            "wall_seconds": self.result.train_seconds,
            "objective": {
                "name": str(objective["name"]),
                "direction": str(objective["direction"]),
                "value": logs.get(str(objective["name"])),
            },
        }

    def _write_outputs(self, wall_seconds: float) -> None:
        assert self.model is not None
        summary = self.metrics()
        summary["wall_seconds"] = wall_seconds
        out = self.output_dir
        (out / "metrics.json").write_text(json.dumps(summary, indent=2) + "\n")
        if not (out / ".hydra").exists():
            # Outside a Hydra app, keep the resolved config beside the outputs too.
            (out / "config.yaml").write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
        if self.best_model is not None and self.best_model.best is not None:
            summary["best_model"] = {
                "monitor": self.best_model.monitor,
                "value": self.best_model.best,
                "epoch": (self.best_model.best_epoch or 0) + 1,
            }
            (out / "metrics.json").write_text(json.dumps(summary, indent=2) + "\n")
        elif self.cfg.callbacks.save_model:
            # model.keras to evaluate or fine-tune, saved_model/ (serving_default) to serve.
            saved_model = bool(self.cfg.callbacks.get("saved_model", True))
            save_model_files(savable_model(self.model), out, saved_model=saved_model)
        chief.cleanup_dir(out, self.run_dir)
        val = summary["validation"]
        shown = ", ".join(f"{k} {v:.4f}" for k, v in val.items()) or "none"
        log.info(
            "trained %d steps in %.1f s (%.0f examples/s); validation: %s",
            summary["steps"],
            wall_seconds,
            summary["examples_per_sec"],
            shown,
        )
