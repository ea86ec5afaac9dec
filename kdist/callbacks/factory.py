"""Every callback of a run, built in one place: configured, fault tolerance and display.

`build` makes what the `callbacks` node configures (TensorBoard, speed scalars, profile,
CSV log, early stopping, extra callbacks); `build_run` adds the NaN guard, the run's
TensorBoard HParams, the savers of `checkpoints/` and `backup/`, the best-model export,
the preemption save, `curves.png` and the progress bar, in the order they run, and says
once when a user's callback has batch hooks that run less often than in `fit`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from kdist.callbacks.best_model import BestModelExport
from kdist.callbacks.curves import Curves, RunCSVLogger, RunCurves
from kdist.callbacks.guards import NonFiniteGuard, PreemptionSave
from kdist.callbacks.progress import ClusterSpeed, ProgressBar
from kdist.callbacks.run_hparams import RunHParams, overridden_values
from kdist.callbacks.tensorboard import EpochTensorBoard, ProfileSteps, TrainingSpeed, profile_range
from kdist.cluster.info import ClusterInfo
from kdist.config.errors import ConfigError
from kdist.config.objective import monitor_mode
from kdist.config.targets import instantiate
from kdist.config.validate import parse_update_freq
from kdist.engine.checkpoint import PeriodicCheckpoint
from kdist.engine.runner import say_batch_hooks
from kdist.runs import layout
from kdist.runs.fileio import read_csv_numbers
from kdist.runs.sweep import TrainJob

__all__ = ["RunCallbacks", "build", "build_run"]

log = logging.getLogger(__name__)


def build(
    callbacks_cfg: Any,
    *,
    output_dir: Path,
    directions: Mapping[str, str] | None = None,
    resuming: bool = False,
    examples_per_step: int = 0,
    epoch_shift: int = 0,
) -> list[keras.callbacks.Callback]:
    """The callbacks a `callbacks` node asks for, writing under `output_dir`.

    Args:
        callbacks_cfg: the `callbacks` config node.
        output_dir: where files go: the run directory on the chief, a temporary folder on
            other workers (see `kdist.cluster.chief.writable_dir`).
        directions: metric name -> `min` or `max`, for monitored metrics. Defaults to
            `None`: losses are minimised, everything else maximised.
        resuming: the run continues from a backup: `history.csv` is appended to.
            Defaults to `False`.
        examples_per_step: the global batch, for the `examples_per_second` scalar
            (`TrainingSpeed`, with the TensorBoard scalars). Defaults to `0`: no speed
            scalars.
        epoch_shift: added to the epoch numbers `history.csv` is given: the run's
            epochs before a later `fit` that numbers its own from `initial_epoch`
            (`kdist.callbacks.curves`). Defaults to `0`.

    Returns:
        Keras callbacks, in the order they run.
    """
    callbacks: list[keras.callbacks.Callback] = []
    if callbacks_cfg.tensorboard.enabled:
        update_freq = parse_update_freq(callbacks_cfg.tensorboard.update_freq)
        callbacks.append(
            EpochTensorBoard(
                log_dir=str(output_dir / layout.TENSORBOARD),
                update_freq=update_freq,
                write_graph=False,
            )
        )
        if examples_per_step:
            callbacks.append(
                TrainingSpeed(
                    log_dir=output_dir / layout.TENSORBOARD / "train",
                    examples_per_step=examples_per_step,
                    every_n_steps=update_freq if isinstance(update_freq, int) else None,
                )
            )
    profile = profile_range(callbacks_cfg.tensorboard.get("profile_steps"))
    if profile is not None:
        # Also without the TensorBoard scalars (tensorboard.enabled=false).
        callbacks.append(
            ProfileSteps(
                log_dir=output_dir / layout.TENSORBOARD / "train", first=profile[0], last=profile[1]
            )
        )
    if callbacks_cfg.csv.enabled:
        callbacks.append(
            RunCSVLogger(str(output_dir / layout.HISTORY), append=resuming, epoch_shift=epoch_shift)
        )
    stopping = callbacks_cfg.early_stopping
    if stopping.enabled:
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor=stopping.monitor,
                patience=int(stopping.patience),
                mode=monitor_mode(stopping.monitor, stopping.mode, directions or {}),
                restore_best_weights=bool(stopping.restore_best_weights),
            )
        )
    for i, node in enumerate(callbacks_cfg.extra or []):
        callback = instantiate(node, _convert_="all")
        if not isinstance(callback, keras.callbacks.Callback):
            raise ConfigError(
                f"callbacks.extra[{i}]._target_",
                f"returned {type(callback).__name__}, not a keras.callbacks.Callback",
                value=node.get("_target_"),
                hint="name a class that subclasses keras.callbacks.Callback",
            )
        callbacks.append(callback)
    return callbacks


@dataclass
class RunCallbacks:
    """What `build_run` returns: the callbacks in order, and the savers the controller drives."""

    callbacks: list[keras.callbacks.Callback] = field(default_factory=list)
    savers: list[PeriodicCheckpoint] = field(default_factory=list)
    best_model: BestModelExport | None = None
    curves: Curves | None = None


def _savers(
    callbacks_cfg: Any,
    *,
    model: keras.Model,
    checkpoint: tf.train.Checkpoint,
    state: Any,
    run_dir: Path,
    strategy: tf.distribute.Strategy,
) -> dict[str, PeriodicCheckpoint]:
    """The enabled savers, by folder: `checkpoints` and `backup`."""
    savers = {}
    for key, folder in (("checkpoint", layout.CHECKPOINTS), ("backup", layout.BACKUP)):
        node = callbacks_cfg[key]
        if node.enabled:
            savers[folder] = PeriodicCheckpoint(
                model=model,
                checkpoint=checkpoint,
                state=state,
                directory=run_dir / folder,
                every_n_steps=int(node.every_n_steps),
                keep=int(node.keep),
                strategy=strategy,
            )
    return savers


def build_run(
    cfg: Any,
    *,
    controller: Any,
    strategy: tf.distribute.Strategy,
    run_dir: Path,
    output_dir: Path,
    is_chief: bool,
    directions: Mapping[str, str],
    extra: Sequence[keras.callbacks.Callback] = (),
    verbose: int = 0,
    cluster: ClusterInfo | None = None,
    job: TrainJob | None = None,
) -> RunCallbacks:
    """Every callback and saver of a run, for `kdist.engine.controller.Controller.fit`.

    Args:
        cfg: the train config.
        controller: the run's controller (its checkpoint, state, global step and
            schedule, whose global batch is the run's).
        strategy: the run's strategy.
        run_dir: the run directory (checkpoints are written under it).
        output_dir: where files go: the run directory on the chief, a scratch folder on
            other workers (see `kdist.cluster.chief.writable_dir`).
        is_chief: this process writes the run's files.
        directions: metric name -> `min` or `max`, for monitored metrics.
        extra: the caller's callbacks, after the configured ones. Defaults to `()`.
        verbose: 0 silent, 1 progress bar (one line per epoch when standard output is
            not a terminal), 2 one line per epoch. Defaults to `0`.
        cluster: this process's cluster (the run's setup): in a local cluster that
            `kdist.launch` started, the chief prints what one process must beat
            (`ClusterSpeed`). Defaults to `None`.
        job: the `kdist.train` job Hydra runs (the run's setup): its overrides and final
            metrics make the run's TensorBoard HParams session (`RunHParams`). Defaults
            to `None`: none (a notebook).

    Returns:
        The callbacks in the order they run, the savers, and the best-model export.
    """
    node = cfg.callbacks
    batch = int(controller.schedule.global_batch_size)  # the run's data plan's
    resuming = controller.global_step > 0
    numbers = getattr(controller, "numbers", None)
    epoch_shift = int(numbers.run_shift) if numbers is not None else 0
    run = RunCallbacks()
    # Keras's `TerminateOnNaN` of the user's acts first, as in `fit`: the guard follows it.
    terminates = any(isinstance(c, keras.callbacks.TerminateOnNaN) for c in extra)
    if node.nan_guard and not terminates:
        run.callbacks.append(NonFiniteGuard())
    with strategy.scope():
        configured = build(
            node,
            output_dir=output_dir,
            directions=directions,
            resuming=resuming,
            examples_per_step=batch,
            epoch_shift=epoch_shift,
        )
    run.callbacks += configured + list(extra)
    if node.nan_guard and terminates:
        run.callbacks.append(NonFiniteGuard(after_terminate_on_nan=True))
    # `build` puts the `callbacks.extra` ones last: with the caller's, the user's callbacks.
    users = configured[len(configured) - len(node.extra or []) :] + list(extra)
    if is_chief:
        # The controller's (a model's own compile sets it, else the config).
        say_batch_hooks(
            users,
            steps_per_execution=int(controller.schedule.steps_per_execution),
            parameter_server=isinstance(strategy, tf.distribute.ParameterServerStrategy),
        )
    if is_chief and node.tensorboard.enabled and job is not None:
        # The command's overrides with the final metrics: TensorBoard's HParams tab.
        hparams = overridden_values(job.overrides, cfg)
        objective = (cfg.get("objective") or {}).get("name")
        run.callbacks.append(
            RunHParams(
                log_dir=output_dir / layout.TENSORBOARD,
                hparams=hparams,
                objective=None if objective in (None, "auto") else str(objective),
                job=job.sweep,
            )
        )
    savers = _savers(
        node,
        model=controller.model,
        checkpoint=controller.checkpoint,
        state=controller.state,
        run_dir=run_dir,
        strategy=strategy,
    )
    run.savers = list(savers.values())
    if node.best_model.monitor:
        monitor = str(node.best_model.monitor)
        run.best_model = BestModelExport(
            directory=output_dir,
            monitor=monitor,
            mode=monitor_mode(monitor, str(node.best_model.mode), directions),
            saved_model=bool(node.get("saved_model", False)),
        )
        run.callbacks.append(run.best_model)
    if node.preemption and "backup" in savers:
        save = functools.partial(controller.save_now, savers["backup"])
        run.callbacks.append(PreemptionSave(save=save, strategy=strategy, run_dir=run_dir))
    # curves.png on the chief only: other workers' output_dir is a temporary folder.
    if node.get("curves", True) and is_chief:
        history = output_dir / layout.HISTORY
        earlier = read_csv_numbers(history) if resuming and history.exists() else []
        # Its last drawing starts once the run's files are written (`kdist.experiment.outputs`).
        run.curves = RunCurves(
            path=output_dir / layout.CURVES,
            history=earlier,
            draw_at_end=False,
            epoch_shift=epoch_shift,
        )
        run.callbacks.append(run.curves)
    if is_chief and cluster is not None and cluster.launched is not None:
        # Under `kdist.launch` on one machine: what one process must beat (printed once).
        workers, ps = cluster.launched
        run.callbacks.append(ClusterSpeed(examples_per_step=batch, workers=workers, ps=ps))
    if verbose != 0:
        # Keras adds no bar of its own when a ProgbarLogger is in the list.
        run.callbacks.append(ProgressBar(examples_per_step=batch))
    return run
