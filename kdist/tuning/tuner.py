"""`KdistTuner`: keras-tuner's `Tuner` whose trials are normal kdist training jobs.

keras-tuner's own trials call `model.fit` under a single-worker strategy at most; here
`run_trial` composes the training config with the trial's values and trains it with
`kdist.Experiment`, so every kdist strategy, model, data source and callback works.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

import keras
import keras_tuner
from keras_tuner import errors as kt_errors
from keras_tuner.engine import trial as trial_module
from omegaconf import OmegaConf

from kdist.config.compose import format_hydra_error
from kdist.config.errors import ConfigError
from kdist.models import hypermodel
from kdist.runs.layout import CONFIG, MODEL, TENSORBOARD
from kdist.tuning import fit_override, hparams, results
from kdist.tuning.deadline import Deadline, StopAtDeadline, TrialTimeout, deadline
from kdist.tuning.oracle_client import DeadlineOracleClient, Heartbeat, OracleUnreachable
from kdist.tuning.oracles import is_finite, reason
from kdist.tuning.plan import TrialPlan

__all__ = ["FatalConfigError", "KdistTuner"]

log = logging.getLogger(__name__)

TrialStatus = trial_module.TrialStatus


class FatalConfigError(kt_errors.FatalError):
    """A config error no trial value causes (e.g. `objective.name`): the search stops."""

    def __init__(self, error: ConfigError):
        super().__init__(str(error))
        self.error = error


class _StopWhenChiefLost(keras.callbacks.Callback):
    def __init__(self, heartbeat: Heartbeat):
        super().__init__()
        self.heartbeat = heartbeat

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.heartbeat.lost.is_set():
            self.model.stop_training = True


class KdistTuner(keras_tuner.Tuner):
    """Run each trial as a kdist training job in `<run_dir>/trials/trial_<id>/`.

    keras-tuner's state (oracle, trials) goes to `<run_dir>/keras_tuner/`, so a search
    started again in the same run directory resumes where it stopped.

    Args:
        oracle: a keras-tuner oracle (`kdist.tuning.oracles.build`).
        plan: how trials become training configs.
        run_dir: the search's run directory.
        heartbeat: seconds between heartbeats to a remote oracle. Defaults to `5.0`.
        hypermodel: a keras-tuner hypermodel that each trial builds with its values
            (a notebook's `build_model`), instead of the config's `model`.
            Defaults to `None`.
        fit_hypermodel: a `HyperModel` whose `fit` trains each trial, with `model.fit`
            redirected to the trial's `Experiment.fit` (`kdist.tuning.fit_override`).
            Defaults to `None`.
        trial_timeout: seconds a trial may take (`tuner.trial_timeout`); a trial over it
            fails with its reason. Defaults to `None`: no limit.

    Raises:
        ValueError: for a non-positive `heartbeat` or `trial_timeout`.
    """

    def __init__(
        self,
        *,
        oracle: Any,
        plan: TrialPlan,
        run_dir: str | Path,
        heartbeat: float = 5.0,
        hypermodel: Any = None,
        fit_hypermodel: fit_override.FitHyperModel | None = None,
        trial_timeout: float | None = None,
    ):
        if heartbeat <= 0:
            raise ValueError(f"`heartbeat` ({heartbeat}) must be positive.")
        if trial_timeout is not None and not trial_timeout > 0:
            raise ValueError(f"`trial_timeout` ({trial_timeout}) must be positive or None.")
        self.fit_hypermodel = fit_hypermodel
        self.trial_timeout = trial_timeout
        self.plan = plan
        self.run_dir = Path(run_dir)
        self.trials_dir = self.run_dir / "trials"
        self.heartbeat_seconds = float(heartbeat)
        self.hypermodel_object = hypermodel
        self._records: dict[str, dict[str, Any]] = {}
        super().__init__(
            oracle=oracle,
            directory=str(self.run_dir),
            project_name="keras_tuner",
            # A fresh start is the caller's: `kdist.tuning.driver.run` clears the folder
            # on the chief only (keras-tuner's `overwrite` would delete it on every tuner).
            overwrite=False,
        )

    # -- the search loop ---------------------------------------------------------------

    def search(self, *fit_args: Any, **fit_kwargs: Any) -> None:
        """Ask the oracle for trials and run them until it answers `STOPPED`.

        keras-tuner's own loop serves the oracle instead when this process is the chief;
        kdist serves it from `kdist.tuning.oracle_chief.OracleServer` and runs trials here.
        """
        self.on_search_begin()
        while True:
            self.pre_create_trial()
            trial = self.oracle.create_trial(self.tuner_id)
            if trial.status == TrialStatus.STOPPED:
                break
            if trial.status == TrialStatus.IDLE:
                # Hyperband waits for other tuners' results; the remote client pauses.
                if not isinstance(self.oracle, DeadlineOracleClient):
                    time.sleep(0.5)
                continue
            self.on_trial_begin(trial)
            # keras-tuner's runner: FailedTrialError -> FAILED, other errors -> INVALID
            # (retried up to max_retries_per_trial), FatalError -> raised.
            self._try_run_and_update_trial(trial, *fit_args, **fit_kwargs)
            self.on_trial_end(trial)
        self.on_search_end()

    def trial_dir(self, trial_id: str) -> Path:
        """The folder a trial trains in."""
        return self.trials_dir / f"trial_{trial_id}"

    # -- one trial -----------------------------------------------------------------------

    def on_trial_begin(self, trial: Any) -> None:
        super().on_trial_begin(trial)
        values = trial.hyperparameters.values
        folder = self.trial_dir(trial.trial_id)
        # A retried trial (or one interrupted by a kill) starts from an empty folder.
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        overrides = self.plan.trial_overrides(values)
        self._records[trial.trial_id] = {
            "trial_id": trial.trial_id,
            "tuner_id": self.tuner_id,
            "status": TrialStatus.RUNNING,
            "reason": "",
            "hyperparameters": self.plan.hparams(values),
            "overrides": overrides,
            "command": self.plan.command(overrides),
            "metrics": {},
            "epochs": None,
            "started": time.time(),
        }
        results.write_record(folder, self._records[trial.trial_id])
        log.info("trial %s on %s: %s", trial.trial_id, self.tuner_id, " ".join(overrides))

    def run_trial(self, trial: Any, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Train the trial's config with the kdist engine; return its final logs.

        `args` and `kwargs` (from `search`) go to `Experiment.fit`: data in hand, e.g. a
        notebook's `tf.data.Dataset` (`kdist.tuning.notebook`); with a `HyperModel` that
        overrides `fit`, they go to its `fit(hp, model, *args, **kwargs)`, whose
        `model.fit` is the trial's `Experiment.fit`. `tuner.trial_timeout` bounds the
        whole trial.

        Raises:
            keras_tuner.errors.FailedTrialError: for a config error caused by the trial's
                values, a loss or metric that is not finite, or a trial over its time.
            FatalConfigError: for a config error no trial value causes.
            OracleUnreachable: when the chief stopped answering during the trial.
        """
        try:
            with deadline(self.trial_timeout) as limit:
                return self._run_trial(trial, limit, *args, **kwargs)
        except TrialTimeout as error:
            raise kt_errors.FailedTrialError(str(error)) from None

    def _run_trial(
        self, trial: Any, limit: Deadline, *args: Any, **kwargs: Any
    ) -> dict[str, float]:
        from kdist.experiment import Experiment

        record = self._records[trial.trial_id]
        overrides = record["overrides"]
        try:
            cfg = self.plan.compose(overrides)
        except ConfigError as error:
            raise kt_errors.FailedTrialError(str(error)) from None
        except Exception as error:  # Hydra and OmegaConf raise many types
            raise kt_errors.FailedTrialError(
                f"the trial's overrides do not compose: {format_hydra_error(error)}"
            ) from None
        # The trial's config, also for a trial that fails before training writes it.
        folder = self.trial_dir(trial.trial_id)
        (folder / CONFIG).write_text(OmegaConf.to_yaml(cfg, resolve=True))
        # Layer names and other global Keras state start afresh in every trial (without
        # the forced garbage collection, which takes seconds once TensorFlow is loaded).
        keras.backend.clear_session(free_memory=False)
        hp = None
        try:
            experiment = Experiment(cfg, run_dir=folder)
            if self.fit_hypermodel is not None:
                hp = keras_tuner.HyperParameters()
                hp.values.update(self.plan.space.hp_values(trial.hyperparameters.values))
                model = self._fit_model(experiment, hp)
            else:
                model = self._model(experiment)
            model = experiment.build_model(model=model)
        except ConfigError as error:
            if self.plan.space.owns(error.key):
                # Chained: `error.txt` keeps the traceback (of `build_model(hp)`, say).
                raise kt_errors.FailedTrialError(str(error)) from error
            raise FatalConfigError(error) from None
        limit.check()
        # No `keras.callbacks.TerminateOnNaN`: kdist's own guard (`callbacks.nan_guard`)
        # stops a diverging trial (FloatingPointError, below), and the final logs are
        # checked for NaN; Keras's callback, a user's batch hook to kdist, only added a
        # warning that it runs every `trainer.steps_per_execution` steps.
        callbacks: list[keras.callbacks.Callback] = []
        if limit.seconds is not None:
            callbacks.append(StopAtDeadline(limit))
        heartbeat = None
        if isinstance(self.oracle, DeadlineOracleClient):
            heartbeat = Heartbeat(self.oracle, trial.trial_id, interval=self.heartbeat_seconds)
            callbacks.append(_StopWhenChiefLost(heartbeat))
        train = self._trainer(experiment, model, hp, record, limit, trial.hyperparameters.values)
        try:
            if heartbeat is not None:
                with heartbeat:
                    logs = train(callbacks, *args, **kwargs)
            else:
                logs = train(callbacks, *args, **kwargs)
        except FloatingPointError as error:
            # kdist's NaN guard: deterministic for these values, so no retry.
            raise kt_errors.FailedTrialError(str(error)) from None
        if heartbeat is not None and heartbeat.lost.is_set():
            raise OracleUnreachable(str(heartbeat.error)) from None
        if limit.expired():
            limit.what = "training"
            raise limit.error()
        objective = str(self.oracle.objective.name)
        if objective not in logs:
            raise FatalConfigError(
                ConfigError(
                    "tuner.objective.name",
                    "is not in the final logs of the trials",
                    value=objective,
                    hint=f"use one of: {', '.join(logs)} (val_* needs trainer.validation=true)",
                )
            )
        record["metrics"] = logs
        if experiment.result is not None:
            record["epochs"] = experiment.result.epochs_run
        bad = {k: v for k, v in logs.items() if not is_finite(v)}
        if bad:
            shown = ", ".join(f"{k}={v}" for k, v in bad.items())
            raise kt_errors.FailedTrialError(
                f"not finite after {record['epochs']} epoch(s): {shown}"
            )
        return logs

    def _trainer(
        self,
        experiment: Any,
        model: keras.Model,
        hp: Any,
        record: dict[str, Any],
        limit: Deadline,
        values: Any,
    ) -> Any:
        """The function that trains the trial: `Experiment.fit`, or the hypermodel's `fit`
        with `model.fit` redirected to it. It returns the trial's metrics."""

        def kdist_fit(callbacks: list[keras.callbacks.Callback], *args: Any, **kwargs: Any) -> Any:
            with limit.training():
                return experiment.fit(*args, callbacks=callbacks, **kwargs)

        if self.fit_hypermodel is None:

            def train(callbacks: list[keras.callbacks.Callback], *args: Any, **kwargs: Any) -> Any:
                kdist_fit(callbacks, *args, **kwargs)
                assert experiment.result is not None
                return {k: float(v) for k, v in experiment.result.final_logs.items()}

            return train

        fitted = self.fit_hypermodel

        def train_fit(callbacks: list[keras.callbacks.Callback], *args: Any, **kwargs: Any) -> Any:
            calls: list[dict[str, Any]] = []

            def model_fit(*fit_args: Any, **fit_kwargs: Any) -> Any:
                given = list(fit_kwargs.pop("callbacks", None) or [])
                # kdist's own callbacks even when `fit` dropped the ones it was given.
                every = [*given, *(c for c in callbacks if all(c is not g for g in given))]
                calls.append({**({"x": None} if fit_args else {}), **fit_kwargs})
                return kdist_fit(every, *fit_args, **fit_kwargs)

            with fit_override.redirect_fit(model, model_fit):
                results = fitted.instance.fit(hp, model, *args, callbacks=list(callbacks), **kwargs)
            if not calls:
                raise kt_errors.FailedTrialError(
                    f"{fitted.label} returned without calling model.fit: kdist trains a trial "
                    "through model.fit"
                )
            fit_overrides, other = fit_override.config_overrides(calls)
            record["fit"] = {"overrides": fit_overrides, "not_config_keys": other}
            record["overrides"] = self.plan.trial_overrides(values, fit=fit_overrides)
            record["command"] = self.plan.command(record["overrides"])
            try:
                return fit_override.to_metrics(results, self.oracle.objective, label=fitted.label)
            except ConfigError as error:
                raise FatalConfigError(error) from None

        return train_fit

    def _fit_model(self, experiment: Any, hp: Any) -> keras.Model:
        """The model of a hypermodel whose `fit` trains the trial, built with `hp` (the
        trial's values, read again by its `fit`) in the strategy's scope."""
        from kdist.models.hypermodel.build import call_build

        assert self.fit_hypermodel is not None
        instance = self.fit_hypermodel.instance
        with experiment.strategy.scope():
            return call_build(instance.build, hp, target=instance, key="model")

    def _model(self, experiment: Any) -> keras.Model | None:
        """The trial's model from `hypermodel` (`None`: the experiment builds `cfg.model`)."""
        if self.hypermodel_object is None:
            return None
        source = experiment.source
        with experiment.strategy.scope():
            return hypermodel.build(
                experiment.cfg.model,
                input_shape=source.input_shape,
                num_classes=source.num_classes,
                target=self.hypermodel_object,
            )

    def on_trial_end(self, trial: Any) -> None:
        record = self._records.pop(trial.trial_id)
        folder = self.trial_dir(trial.trial_id)
        record["status"] = trial.status
        record["reason"] = reason(trial.message) if trial.message else ""
        record["finished"] = time.time()
        record["seconds"] = round(record["finished"] - record["started"], 3)
        record["objective"] = {
            "name": str(self.oracle.objective.name),
            "direction": str(self.oracle.objective.direction),
            "value": record["metrics"].get(str(self.oracle.objective.name)),
        }
        if trial.message:
            (folder / "error.txt").write_text(trial.message)
            log.warning("trial %s failed: %s", trial.trial_id, record["reason"])
        results.write_record(folder, record)
        hparams.write_session(
            folder / TENSORBOARD,
            trial_id=trial.trial_id,
            hparams=record["hyperparameters"],
            metrics=record["metrics"],
            step=int(record["epochs"] or 0),
            started=record["started"],
        )
        super().on_trial_end(trial)

    def load_model(self, trial: Any) -> keras.Model:
        """The model a trial saved (`callbacks.save_model=true`, the default)."""
        path = self.trial_dir(trial.trial_id) / MODEL
        if not path.is_file():
            raise FileNotFoundError(
                f"trial {trial.trial_id} saved no model at {path} (callbacks.save_model=false?)"
            )
        return keras.models.load_model(path)
