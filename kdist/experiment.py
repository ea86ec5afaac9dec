"""`Experiment`: one training job, the same from the command line and from a notebook."""

from __future__ import annotations

import json
import logging
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
from kdist.config.build import instantiate
from kdist.config.errors import ConfigError
from kdist.config.validate import validate
from kdist.data import Source, make_dataset_fn, steps_per_epoch
from kdist.engine import FitResult, Runner, StandardRunner
from kdist.engine import fit as engine_fit

__all__ = ["Experiment"]

log = logging.getLogger(__name__)


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
        self.model: keras.Model | None = None
        self.optimizer: keras.optimizers.Optimizer | None = None
        self.runner: Runner | None = None
        self.result: FitResult | None = None
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

    def _make_metrics(self) -> list[keras.metrics.Metric]:
        return [instantiate(node, _convert_="all") for node in self.cfg.trainer.metrics or []]

    def build_model(self) -> keras.Model:
        """Build the model, optimizer, loss and metrics inside `strategy.scope()`.

        Returns:
            The compiled `keras.Model` (compiled so that `model.keras` reloads with its
            optimizer and loss; training runs through the kdist engine, not `fit`).
        """
        cfg = self.cfg
        with self.strategy.scope():
            model = models.from_config(
                cfg.model,
                input_shape=self.source.input_shape,
                num_classes=self.source.num_classes,
            )
            optimizer = optimizers.build(
                cfg.optimizer,
                num_replicas=self.num_replicas,
                mixed_precision=cfg.runtime.mixed_precision,
            )
            # Keras creates optimizer slots lazily on the first update; under a strategy
            # they must exist before the step function is traced.
            optimizer.build(model.trainable_variables)
            train_loss = instantiate(cfg.trainer.loss, _convert_="all", reduction=None)
            model.compile(
                optimizer=optimizer,
                loss=instantiate(cfg.trainer.loss, _convert_="all"),
                metrics=self._make_metrics(),
            )
            global_batch = int(cfg.trainer.global_batch_size)
            seed = int(cfg.runtime.seed)
            validation = bool(cfg.trainer.validation) and self.source.size("validation") > 0
            self.runner = StandardRunner(
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
        return model

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
        with self.strategy.scope():
            configured = kdist_callbacks.build(
                cfg.callbacks, output_dir=self.output_dir, directions=self._directions()
            )
        callback_list = keras.callbacks.CallbackList(
            [*configured, *callbacks],
            add_history=True,
            add_progbar=verbose != 0,
            model=self.model,
            verbose=verbose,
            epochs=int(cfg.trainer.epochs),
            steps=self.steps_per_epoch,
        )
        started = time.perf_counter()
        self.result = engine_fit(
            self.runner,
            model=self.model,
            callbacks=callback_list,
            epochs=int(cfg.trainer.epochs),
            steps_per_epoch=self.steps_per_epoch,
            steps_per_execution=int(cfg.trainer.steps_per_execution),
            validation_freq=int(cfg.trainer.validation_freq),
        )
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

    def metrics(self) -> dict[str, Any]:
        """The summary written to `metrics.json` after `fit`."""
        if self.result is None or self.optimizer is None:
            raise RuntimeError("`metrics()` needs a finished `fit()`.")
        logs = self.result.final_logs
        examples = self.result.steps_run * int(self.cfg.trainer.global_batch_size)
        seconds = max(self.result.train_seconds, 1e-9)
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
        if self.cfg.callbacks.save_model:
            self.model.save(out / "model.keras")
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
