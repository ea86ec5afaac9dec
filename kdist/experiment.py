"""`Experiment`: one training job, the same from the command line and from a notebook."""

from __future__ import annotations

import csv
import functools
import json
import logging
import os
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf
from omegaconf import DictConfig, OmegaConf

from kdist import callbacks as kdist_callbacks
from kdist import chief, models, optimizers, runtime, strategies
from kdist.callbacks.best_model import BestModelExport, save_model_files
from kdist.callbacks.checkpoint import (
    PeriodicCheckpoint,
    TrainingState,
    describe_resume,
    restore_latest,
    resume_point,
)
from kdist.callbacks.curves import Curves
from kdist.callbacks.factory import monitor_mode
from kdist.callbacks.guards import NonFiniteGuard
from kdist.callbacks.preemption import PreemptionSave
from kdist.callbacks.progress import ProgressBar
from kdist.config.build import instantiate
from kdist.config.errors import ConfigError
from kdist.config.validate import validate
from kdist.data import Source, make_dataset_fn, steps_per_epoch
from kdist.engine import FitResult, Runner, StandardRunner
from kdist.engine import fit as engine_fit
from kdist.engine.ps_runner import ParameterServerRunner, savable_model, training_variables

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
    now = datetime.now()
    return Path("outputs") / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S-%f")


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
        validate(cfg)
        self.cfg = cfg
        self.run_dir = Path(run_dir or cfg.get("run_dir") or _default_run_dir())
        runtime.setup(cfg.runtime)
        self.strategy: tf.distribute.Strategy = strategies.build(cfg.strategy)
        self.num_replicas = int(self.strategy.num_replicas_in_sync)
        batch = int(cfg.trainer.global_batch_size)
        if batch % self.num_replicas:
            lower = max(self.num_replicas, batch - batch % self.num_replicas)
            raise ConfigError(
                "trainer.global_batch_size",
                f"is not divisible by the {self.num_replicas} replicas",
                value=batch,
                hint=f"use a multiple of {self.num_replicas}, e.g. {lower}",
            )
        self.source = self._build_source()
        self.steps_per_epoch = steps_per_epoch(
            self.source, batch, cfg.trainer.get("steps_per_epoch")
        )
        self.output_dir = chief.writable_dir(self.run_dir, self.strategy)
        self._check_objective()
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
        directions = {"loss": "min"}
        for metric in self._make_metrics():
            direction = getattr(metric, "_direction", None)
            if direction in ("up", "down"):
                directions[metric.name] = "max" if direction == "up" else "min"
        return directions

    def _check_objective(self) -> None:
        objective = self.cfg.get("objective")
        if objective is None:
            return
        names = ["loss", *(metric.name for metric in self._make_metrics())]
        if objective.name not in [*names, *(f"val_{name}" for name in names)]:
            raise ConfigError(
                "objective.name",
                "is not a metric of this run",
                value=objective.name,
                hint=f"use one of: {', '.join(names)} (val_<name> for validation)",
            )
        validates = bool(self.cfg.trainer.validation) and self.source.size("validation") > 0
        if str(objective.name).startswith("val_") and not validates:
            # Training still makes sense; sweeps and the tuner get no value (the tuner stops).
            log.warning("objective %s needs validation, which this run has not", objective.name)

    def _make_metrics(self) -> list[keras.metrics.Metric]:
        return [instantiate(node, _convert_="all") for node in self.cfg.trainer.metrics or []]

    def build_model(self, model: keras.Model | None = None) -> keras.Model:
        """Build the model, optimizer, loss and metrics inside `strategy.scope()`.

        Args:
            model: a model to use instead of building `cfg.model`, e.g. one reloaded
                with `kdist.export.load_model` (create it inside `strategy.scope()`).
                Defaults to `None`.

        Returns:
            The compiled `keras.Model` (compiled so that `model.keras` reloads with its
            optimizer and loss; training runs through the kdist engine, not `fit`).
        """
        cfg = self.cfg
        with self.strategy.scope():
            if model is None:
                model = models.from_config(
                    cfg.model,
                    input_shape=self.source.input_shape,
                    num_classes=self.source.num_classes,
                )
            optimizer = optimizers.build(
                cfg.optimizer,
                num_replicas=self.num_replicas,
                mixed_precision=cfg.runtime.mixed_precision,
                total_steps=int(cfg.trainer.epochs) * self.steps_per_epoch,
            )
            # Keras creates optimizer slots lazily on the first update; under a strategy
            # they must exist before the step function is traced. Sharded variables
            # (parameter-server partitioning) are updated shard by shard.
            optimizer.build(training_variables(model))
            train_loss = instantiate(cfg.trainer.loss, _convert_="all", reduction=None)
            model.compile(
                optimizer=optimizer,
                loss=instantiate(cfg.trainer.loss, _convert_="all"),
                metrics=self._make_metrics(),
            )
            global_batch = int(cfg.trainer.global_batch_size)
            seed = int(cfg.runtime.seed)
            validation = bool(cfg.trainer.validation) and self.source.size("validation") > 0
            runner_class: Any = StandardRunner
            if isinstance(self.strategy, tf.distribute.ParameterServerStrategy):
                # The chief schedules K-step functions on the workers.
                runner_class = functools.partial(
                    ParameterServerRunner,
                    steps_per_schedule=int(cfg.strategy.steps_per_schedule),
                )
            self.runner = runner_class(
                strategy=self.strategy,
                model=model,
                optimizer=optimizer,
                loss=train_loss,
                make_metrics=self._make_metrics,
                train_dataset_fn=make_dataset_fn(
                    self.source, "train", cfg.data, global_batch_size=global_batch, seed=seed
                ),
                validation_dataset_fn=(
                    make_dataset_fn(
                        self.source,
                        "validation",
                        cfg.data,
                        global_batch_size=global_batch,
                        seed=seed,
                    )
                    if validation
                    else None
                ),
                global_batch_size=global_batch,
                steps_per_execution=int(cfg.trainer.steps_per_execution),
                jit_compile=bool(cfg.runtime.jit_compile),
            )
        self.model, self.optimizer = model, optimizer
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
        metrics.variables_list = list(getattr(self.runner, "train_metric_variables", []))
        self.checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, state=self.state, metrics=metrics
        )

    def _train_dataset_fn(self, skip_examples: int = 0) -> Any:
        return make_dataset_fn(
            self.source,
            "train",
            self.cfg.data,
            global_batch_size=int(self.cfg.trainer.global_batch_size),
            seed=int(self.cfg.runtime.seed),
            skip_examples=skip_examples,
        )

    def restore(self) -> int:
        """Resume from the newest readable backup in `<run_dir>/backup`, if there is one.

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
        path = restore_latest(self.checkpoint, self.run_dir / "backup")
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
        set_data = getattr(self.runner, "set_train_dataset_fn", None)
        if set_data is None:
            raise RuntimeError(f"{type(self.runner).__name__} cannot resume its input position")
        set_data(self._train_dataset_fn(skip_examples=point.examples))
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
