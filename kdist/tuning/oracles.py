"""keras-tuner's oracles with what kdist needs around them, and `build` from `tuner.*`.

The three oracles (`tuner=random|bayesian|hyperband`) are keras-tuner's own; the mixin
adds, without changing how they search:

- atomic state files, so a search killed while saving still resumes;
- a clean stop after `max_consecutive_failed_trials` failures in a row: keras-tuner
  raises inside `end_trial` (in the middle of a gRPC call when distributed, before it
  saves the trial); kdist records the reason and hands out `STOPPED` trials instead;
- the tuner id that ran each trial, saved with the oracle's state;
- a `trial_ended` hook, called under the oracle's lock, that writes `trials.csv`.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras_tuner
from keras_tuner import oracles as kt_oracles
from keras_tuner.engine import trial as trial_module
from omegaconf import DictConfig, OmegaConf

from kdist.compat.tools_private import config_root, set_oracle_seed
from kdist.config.errors import ConfigError
from kdist.config.objective import resolve_objective
from kdist.config.targets import instantiate
from kdist.config.validate import check_choice, check_positive, check_target_keys
from kdist.runs.fileio import write_text_atomic

__all__ = [
    "KDIST_TUNER_KEYS",
    "BayesianOptimizationOracle",
    "HyperbandOracle",
    "RandomSearchOracle",
    "build",
    "check",
    "is_finite",
    "reason",
]

# Keys of the `tuner` node that kdist consumes; the rest go to the oracle's constructor.
KDIST_TUNER_KEYS = ("objective", "space", "distributed", "overwrite", "verbose", "trial_timeout")
# Oracle arguments kdist sets itself.
_INJECTED = ("hyperparameters", "allow_new_entries", "tune_new_entries")

synchronized = keras_tuner.synchronized
TrialStatus = trial_module.TrialStatus


_EXCEPTION_LINE = re.compile(
    r"^(?P<name>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))(?::\s*(?P<text>.*))?$"
)


def reason(message: str | None) -> str:
    """One line saying why a trial failed, from keras-tuner's traceback message.

    The last exception's name (without its module) and its message, lines joined;
    `FailedTrialError` (kdist's own "this trial failed") is left out.
    """
    lines = [line.rstrip() for line in (message or "").splitlines() if line.strip()]
    for index in range(len(lines) - 1, -1, -1):
        match = _EXCEPTION_LINE.match(lines[index])
        if match:
            name = match.group("name").rsplit(".", 1)[-1]
            text = " ".join([match.group("text") or "", *lines[index + 1 :]]).strip()
            if name == "FailedTrialError":
                return text
            return f"{name}: {text}" if text else name
    return lines[-1].strip() if lines else ""


def _write_json(path: str, state: dict[str, Any]) -> None:
    write_text_atomic(Path(path), json.dumps(state))


class _KdistOracleMixin:
    """kdist's additions to a keras-tuner `Oracle` (see the module docstring)."""

    trials: dict[str, Any]
    ongoing_trials: dict[str, Any]
    _retry_queue: list[str]
    tuner_ids: set[str]
    end_order: list[str]
    max_consecutive_failed_trials: int

    def _kdist_init(self) -> None:
        self.stop_reason: str | None = None
        self.trial_tuners: dict[str, str] = {}
        self.trial_ended: Callable[[Any], None] | None = None

    @synchronized
    def create_trial(self, tuner_id: str) -> Any:
        if self.stop_reason is not None:
            self.tuner_ids.discard(tuner_id)
            return trial_module.Trial(
                self.get_space(),  # type: ignore[attr-defined]
                trial_id=str(len(self.trials)),
                status=TrialStatus.STOPPED,
            )
        trial = super().create_trial(tuner_id)  # type: ignore[misc]
        if trial.status == TrialStatus.RUNNING:
            self.trial_tuners[trial.trial_id] = tuner_id
        return trial

    @synchronized
    def end_trial(self, trial: Any) -> None:
        running = {t.trial_id for t in self.ongoing_trials.values()}
        if trial.trial_id in self.end_order and trial.trial_id not in running:
            # A late report from a tuner the chief already gave up as lost.
            return
        super().end_trial(trial)  # type: ignore[misc]
        # keras-tuner saved its state before it popped the trial from `ongoing_trials`;
        # a kill right now would run the finished trial again on resume. Save again.
        self.save()
        if self.trial_ended is not None:
            self.trial_ended(self.trials[trial.trial_id])

    @synchronized
    def get_best_trials(self, num_trials: int = 1) -> list[Any]:
        """keras-tuner's, without the completed trials not yet scored.

        The chief's own tuner shares its `Trial` objects with the oracle and marks one
        COMPLETED before `end_trial` scores it; a worker's `end_trial` in between (a gRPC
        thread writing `best.yaml`) would otherwise sort a `None` score.
        """
        scored = [
            t
            for t in self.trials.values()
            if t.status == TrialStatus.COMPLETED and t.score is not None
        ]
        best = sorted(
            scored,
            key=lambda trial: trial.score,
            reverse=self.objective.direction == "max",  # type: ignore[attr-defined]
        )
        if len(best) < num_trials:
            best += [t for t in self.trials.values() if t not in scored]
        return best[:num_trials]

    def reload(self) -> None:
        super().reload()  # type: ignore[misc]
        # Trials keras-tuner found "ongoing" but whose own record says they ended (a kill
        # between its two saves) are not run again.
        ended = (TrialStatus.COMPLETED, TrialStatus.FAILED)
        self._retry_queue = [t for t in self._retry_queue if self.trials[t].status not in ended]

    @synchronized
    def remote_state(self, *, exclude: str | None = None) -> tuple[dict[str, str], set[str]]:
        """`(tuner id -> running trial id, tuners between trials)`, without `exclude`."""
        ongoing = {t: trial.trial_id for t, trial in self.ongoing_trials.items() if t != exclude}
        waiting = set(self.tuner_ids) - set(ongoing) - {exclude}
        return ongoing, waiting

    @synchronized
    def abandon(self, tuner_id: str, message: str) -> None:
        """End `tuner_id`'s running trial as failed with `message`, and forget the tuner."""
        trial = self.ongoing_trials.get(tuner_id)
        if trial is not None:
            trial.status = TrialStatus.FAILED
            trial.message = message
            self.end_trial(trial)
        self.tuner_ids.discard(tuner_id)

    def _check_consecutive_failures(self) -> None:
        # Replaces keras-tuner's check, which raises RuntimeError from `end_trial`
        # before the trial and the oracle are saved.
        run = 0
        for trial_id in self.end_order:
            run = run + 1 if self.trials[trial_id].status == TrialStatus.FAILED else 0
        limit = self.max_consecutive_failed_trials
        if limit and run >= limit and self.stop_reason is None:
            last = self.trials[self.end_order[-1]]
            why = reason(last.message)
            self.stop_reason = (
                f"{run} trials failed in a row (tuner.max_consecutive_failed_trials={limit})"
                + (f"; the last one: {why}" if why else "")
            )

    def _save_trial(self, trial: Any) -> None:
        path = os.path.join(self._get_trial_dir(trial.trial_id), "trial.json")  # type: ignore[attr-defined]
        _write_json(path, trial.get_state())

    @synchronized
    def save(self) -> None:
        # Atomic, and under the oracle's lock: the gRPC threads of a distributed search
        # and the chief's own tuner both save.
        _write_json(self._get_oracle_fname(), self.get_state())  # type: ignore[attr-defined]

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()  # type: ignore[misc]
        state["kdist_trial_tuners"] = dict(self.trial_tuners)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)  # type: ignore[misc]
        self.trial_tuners = dict(state.get("kdist_trial_tuners", {}))


class RandomSearchOracle(_KdistOracleMixin, kt_oracles.RandomSearchOracle):
    """keras-tuner's `RandomSearchOracle` (`tuner=random`), with kdist's additions."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._kdist_init()


class BayesianOptimizationOracle(_KdistOracleMixin, kt_oracles.BayesianOptimizationOracle):
    """keras-tuner's Gaussian-process `BayesianOptimizationOracle` (`tuner=bayesian`)."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._kdist_init()

    def populate_space(self, trial_id: str) -> dict[str, Any]:
        from sklearn.exceptions import ConvergenceWarning

        with warnings.catch_warnings():
            # The Gaussian process is refitted on a handful of noisy points at every
            # trial; scikit-learn warns that its kernel hits a bound, which is expected
            # here and nothing the user can act on.
            warnings.simplefilter("ignore", ConvergenceWarning)
            return super().populate_space(trial_id)


class HyperbandOracle(_KdistOracleMixin, kt_oracles.HyperbandOracle):
    """keras-tuner's `HyperbandOracle` (`tuner=hyperband`), capped at `max_trials`.

    Each trial sets `trainer.epochs` to its budget (`tuner/epochs`) and trains from
    scratch, so any trial, the best included, is reproduced by one `python -m kdist.train`
    with its overrides (keras-tuner's own Hyperband tuner resumes the weights of an
    earlier trial instead, which no single command reproduces).

    Args:
        max_trials: the most trials to run. Defaults to `None` (Hyperband's own budget).
        **kwargs: `keras_tuner.oracles.HyperbandOracle` arguments.
    """

    def __init__(self, *, max_trials: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.max_trials = max_trials
        self._kdist_init()


def _signature(base: type, **extra: Any) -> inspect.Signature:
    """keras-tuner's constructor signature (plus `extra` keyword arguments), so that
    `check_target_keys` names an unknown `tuner.*` key instead of passing `**kwargs`."""
    params = [p for name, p in inspect.signature(base).parameters.items() if name != "self"]
    params += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
        for name, default in extra.items()
    ]
    return inspect.Signature(params)


RandomSearchOracle.__signature__ = _signature(kt_oracles.RandomSearchOracle)
BayesianOptimizationOracle.__signature__ = _signature(kt_oracles.BayesianOptimizationOracle)
HyperbandOracle.__signature__ = _signature(kt_oracles.HyperbandOracle, max_trials=None)


def _oracle_args(tuner_cfg: DictConfig) -> DictConfig:
    container = OmegaConf.to_container(tuner_cfg, resolve=True)
    assert isinstance(container, dict)
    for key in KDIST_TUNER_KEYS:
        container.pop(key, None)
    return OmegaConf.create(container)


def check(tuner_cfg: DictConfig) -> None:
    """Check the `tuner` node before TensorFlow starts.

    Raises:
        ConfigError: naming the key: a non-positive `max_trials` or deadline, an unknown
            objective direction, an oracle argument its `_target_` does not take, or one
            that kdist sets itself.
    """
    check_positive("tuner.max_trials", tuner_cfg.max_trials)
    check_positive("tuner.max_retries_per_trial", tuner_cfg.max_retries_per_trial, strict=False)
    check_positive("tuner.max_consecutive_failed_trials", tuner_cfg.max_consecutive_failed_trials)
    check_choice("tuner.objective.direction", tuner_cfg.objective.direction, ("min", "max"))
    if not str(tuner_cfg.objective.name):
        raise ConfigError("tuner.objective.name", "is empty", hint="e.g. val_accuracy")
    distributed = tuner_cfg.distributed
    for key in ("timeout", "connect_timeout", "heartbeat", "worker_timeout"):
        check_positive(f"tuner.distributed.{key}", distributed[key])
    check_positive("tuner.distributed.tuners", distributed.tuners, allow_none=True)
    check_positive("tuner.trial_timeout", tuner_cfg.get("trial_timeout"), allow_none=True)
    if "factor" in tuner_cfg and int(tuner_cfg.factor) < 2:
        raise ConfigError("tuner.factor", "must be an integer >= 2", value=tuner_cfg.factor)
    if "max_epochs" in tuner_cfg:
        check_positive("tuner.max_epochs", tuner_cfg.max_epochs)
    check_target_keys("tuner", tuner_cfg, injected=_INJECTED, ignore=KDIST_TUNER_KEYS)


def build(tuner_cfg: DictConfig, *, hyperparameters: Any) -> Any:
    """The oracle `tuner._target_` names, searching `hyperparameters` for `tuner.objective`.

    Args:
        tuner_cfg: the `tuner` node.
        hyperparameters: the search space (`Space.hyperparameters()`).

    Returns:
        A `keras_tuner.Oracle`.
    """
    # `tuner.objective` follows the run's `objective`, whose `auto` is resolved from the
    # whole config (OmegaConf nodes know their root).
    resolve_objective(config_root(tuner_cfg))
    objective = keras_tuner.Objective(
        str(tuner_cfg.objective.name), direction=str(tuner_cfg.objective.direction)
    )
    oracle = instantiate(
        _oracle_args(tuner_cfg),
        _convert_="all",
        objective=objective,
        hyperparameters=hyperparameters,
        # Every trial value must come from the configured space.
        allow_new_entries=False,
        tune_new_entries=True,
    )
    if not isinstance(oracle, keras_tuner.Oracle):
        raise ConfigError(
            "tuner._target_",
            f"returned {type(oracle).__name__}, not a keras_tuner.Oracle",
            value=tuner_cfg.get("_target_"),
        )
    if oracle.seed != tuner_cfg.seed and tuner_cfg.seed is not None:
        # keras-tuner replaces seed 0 with a random one.
        set_oracle_seed(oracle, int(tuner_cfg.seed))
    oracle.verbose = int(tuner_cfg.verbose)
    return oracle


def is_finite(value: Any) -> bool:
    """Whether a metric value is a finite number."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
