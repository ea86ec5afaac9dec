"""What `python -m kdist.tune` drives: one search, in one process or across a cluster (`run`).

```python
import kdist
from kdist import tuning

cfg = kdist.compose(["tuner.max_trials=4", "trainer.epochs=2"], config_name="tune")
result = tuning.run(cfg, run_dir="outputs/tune", overrides=["trainer.epochs=2"])
result.best["command"]      # python -m kdist.train trainer.epochs=2 optimizer.learning_rate=...
```
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from kdist.config.errors import ConfigError
from kdist.config.objective import direction_of, resolve_objective
from kdist.config.validate import validate
from kdist.models import hypermodel
from kdist.runs import lock as run_lock
from kdist.tuning import fit_override, hparams, oracles, results, search_settings
from kdist.tuning.folder import SEARCH_STATE, accept_search_dir
from kdist.tuning.oracle_chief import OracleServer
from kdist.tuning.oracle_client import DeadlineOracleClient
from kdist.tuning.plan import TrialPlan, base_overrides, trial_config_name
from kdist.tuning.roles import Role, resolve_role
from kdist.tuning.space import Space
from kdist.tuning.tuner import KdistTuner

__all__ = ["SearchResult", "check", "run", "uses_hypermodel"]

log = logging.getLogger(__name__)

# Strategies whose trials span several processes; parallel tuning runs one trial per tuner.
_MULTI_PROCESS = ("multi_worker", "parameter_server")


@dataclass
class SearchResult:
    """What `run` returns.

    Attributes:
        run_dir: the search's run directory.
        role: this process's role.
        trials: the rows of `trials.csv` (empty on workers, which write no shared file).
        best: the content of `best.yaml`, or `None` when no trial completed (or on workers).
        stop_reason: why the search stopped early (too many failures in a row), or `None`.
        lost_tuners: tuners the chief gave up on.
        oracle: the search's keras-tuner oracle (its trials, `get_best_trials`).
    """

    run_dir: Path
    role: Role
    trials: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None
    stop_reason: str | None = None
    lost_tuners: list[str] = field(default_factory=list)
    oracle: Any = None


def check(cfg: DictConfig) -> Space:
    """Check a tune config before TensorFlow starts; return its search space.

    Raises:
        ConfigError: naming the key: a missing `tuner` node, a bad tuner setting or
            space expression.
    """
    if cfg.get("tuner") is None:
        raise ConfigError(
            "tuner", "is missing", hint="run python -m kdist.tune, or add tuner=random"
        )
    # `objective: auto` becomes the metric the trials log (tuner.objective follows it).
    resolve_objective(cfg)
    oracles.check(cfg.tuner)
    # A hypermodel brings its own hyperparameters: the config keys may be none.
    return Space.from_config(cfg.tuner.space, allow_empty=uses_hypermodel(cfg))


def uses_hypermodel(cfg: DictConfig) -> bool:
    """Whether `model._target_` is a keras-tuner hypermodel (`build_model(hp)`)."""
    model_cfg = cfg.get("model")
    return model_cfg is not None and hypermodel.is_hypermodel(hypermodel.locate(model_cfg))


# Config keys that a model compiled by its hypermodel ignores (its compile is kept).
_COMPILE_KEYS = ("optimizer", "trainer.loss", "trainer.loss_weights", "trainer.metrics")


def _add_hypermodel(
    space: Space,
    base_cfg: DictConfig,
    target: Any = None,
    *,
    timeout: float | None = None,
    fit_kwargs: Mapping[str, Any] | None = None,
) -> tuple[Space, hypermodel.SpaceFound, fit_override.FitHyperModel | None]:
    """The space with the hyperparameters `model._target_` declares (found by building it).

    A `keras_tuner.HyperModel` whose class overrides `fit` adds those `fit` declares
    (`kdist.tuning.fit_override.probe`); its `fit` is then what trains each trial.

    Raises:
        ConfigError: as `kdist.models.hypermodel.search_space`; naming `tuner.space.<key>`
            for a compile key tuned for a model its hypermodel compiles; naming
            `tuner.space` when nothing is left to tune; naming `model._target_` for a
            `fit` that raises or never calls `model.fit`; naming `tuner.trial_timeout`
            when building with the defaults takes longer.
    """
    from kdist.data.pipeline import build_source
    from kdist.process import runtime
    from kdist.tuning.deadline import TrialTimeout

    # Building the model starts TensorFlow: logical devices, seeds and precision first.
    runtime.setup(base_cfg.runtime)

    def shapes() -> tuple[Any, int]:
        source = build_source(base_cfg.data.source)
        return source.input_shape, source.num_classes

    try:
        found, fitted = _discover(base_cfg, target, shapes, timeout, fit_kwargs)
    except TrialTimeout as error:
        raise ConfigError(
            "tuner.trial_timeout",
            "was exceeded building model._target_ with its default hyperparameters (the "
            "search finds the space this way, before the first trial)",
            value=error.seconds,
            hint="raise tuner.trial_timeout, or make the default hyperparameters quicker to build",
        ) from None
    if found.compiled:
        for d in space:
            if d.key.startswith(tuple(f"{k}." for k in _COMPILE_KEYS)) or d.key in _COMPILE_KEYS:
                raise ConfigError(
                    f"tuner.space.{d.key}",
                    f"has no effect: {found.target} compiles the model itself, and its "
                    "optimizer, loss and metrics are kept",
                    hint="tune it in build_model with hp (e.g. hp.Float('learning_rate', "
                    "1e-4, 1e-2, sampling='log')), or remove it from tuner.space",
                )
    declared = found.hyperparameters if fitted is None else fitted.hyperparameters
    space = space.with_hypermodel(declared, fit_names=fitted.names if fitted else ())
    if not len(space):
        raise ConfigError(
            "tuner.space",
            f"is empty and {found.target} declares no hyperparameters: there is nothing to tune",
        )
    log.info(
        "%s declares %d hyperparameter(s): %s",
        found.target,
        len(declared.space),
        ", ".join(p.name for p in declared.space) or "none",
    )
    if fitted is not None:
        log.info(
            "%s trains each trial; it declares %s",
            fitted.label,
            ", ".join(fitted.names) or "no hyperparameter of its own",
        )
    return space, found, fitted


def _discover(
    base_cfg: DictConfig,
    target: Any,
    shapes: Callable[[], tuple[Any, int]],
    timeout: float | None,
    fit_kwargs: Mapping[str, Any] | None,
) -> tuple[hypermodel.SpaceFound, fit_override.FitHyperModel | None]:
    """Build the hypermodel with its defaults (and probe its `fit`), within `timeout`."""
    from kdist.models.hypermodel.build import builder, call_build
    from kdist.tuning.deadline import deadline

    located = hypermodel.locate(base_cfg.model) if target is None else target
    with deadline(timeout, what="building model._target_ with its defaults"):
        found = hypermodel.search_space(base_cfg.model, shapes=shapes, target=target)
        if not fit_override.overrides_fit(located):
            return found, None
        build_fn = builder(located, base_cfg.model, key="model", shapes=shapes)
        instance = getattr(build_fn, "__self__", located)
        fitted = fit_override.probe(
            instance,
            found.hyperparameters,
            build=lambda hp: call_build(build_fn, hp, target=located, key="model"),
            fit_kwargs=fit_kwargs,
        )
    return found, fitted


def _auto_objective(cfg: DictConfig, found: hypermodel.SpaceFound) -> None:
    """`objective: auto` from what a compiled hypermodel logs, not the config's metrics:
    its accuracy when it has one, else its loss (`val_` with validation)."""
    base = "accuracy" if "accuracy" in found.metrics else "loss"
    validates = bool(OmegaConf.select(cfg, "trainer.validation", default=True))
    name = f"val_{base}" if validates else base
    cfg.objective.name = name
    cfg.objective.direction = direction_of(name)
    log.info(
        "objective auto: %s (%s), from what %s compiles", name, direction_of(name), found.target
    )


def _strategy_target(cfg: DictConfig) -> str:
    return str(OmegaConf.select(cfg, "strategy._target_", default="") or "")


def run(
    cfg: DictConfig,
    *,
    run_dir: str | Path,
    overrides: Sequence[str] = (),
    config_name: str = "tune",
    config_dir: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    hypermodel_object: Any = None,
    on_accepted: Callable[[], None] | None = None,
    fit_kwargs: Mapping[str, Any] | None = None,
    folder_key: str = "hydra.run.dir",
) -> SearchResult:
    """Run (or resume) the search `cfg.tuner` describes.

    Args:
        cfg: a composed tune config (`conf/tune.yaml` or a tune recipe).
        run_dir: the search's run directory (shared by every process when distributed).
        overrides: the command-line overrides; all but `tuner*`, `hydra*` and `run_dir`
            apply to every trial. Defaults to `()`.
        config_name: the config `cfg` was composed from. Defaults to `"tune"`.
        config_dir: the folder given with `-cd`. Defaults to `None`.
        env: the environment to read the role from. Defaults to `None`: `os.environ`.
        hypermodel_object: the hypermodel that trials build (a notebook's
            `build_model`), instead of `model._target_`. Defaults to `None`.
        on_accepted: called on the chief once the run directory is accepted for this
            search (a new one, or the same search resumed), before any trial.
            Defaults to `None`.
        fit_kwargs: `Experiment.fit` arguments of every trial (data in hand, in a
            search in one process). Defaults to `None`.
        folder_key: the key or argument naming `run_dir`, for messages. Defaults to
            `"hydra.run.dir"`.

    Returns:
        A `SearchResult`.

    The chief holds the run folder's lock for the whole search (`kdist.runs.lock`,
    `kind="search"`): a folder another process holds, or a training run's folder, is
    refused in one line (`kdist.tuning.folder.accept_search_dir`).

    Raises:
        ConfigError: for bad settings or a folder the search may not own, before any
            trial runs.
        FatalConfigError: when the first trial finds a config error no trial value causes.
        OracleUnreachable: on a worker whose chief stopped answering.
    """
    # Before `check` resolves it from the config's metrics.
    auto_objective = str(OmegaConf.select(cfg, "objective.name", default="")) == "auto"
    space = check(cfg)
    tuner_cfg = cfg.tuner
    run_dir = Path(run_dir)
    distributed = tuner_cfg.distributed
    role = resolve_role(env, tuners=distributed.tuners)
    if fit_kwargs and role.distributed:
        raise ConfigError(
            "tuner.distributed",
            "cannot pass data in hand to other processes",
            hint="run a search over data in hand in one process, or give it as data=...",
        )
    plan = TrialPlan(
        space=space,
        overrides=base_overrides(overrides),
        config_name=trial_config_name(config_name, config_dir),
        config_dir=config_dir,
        objective={
            "name": str(tuner_cfg.objective.name),
            "direction": str(tuner_cfg.objective.direction),
        },
    )
    base_cfg = plan.compose()
    validate(base_cfg)
    resolve_objective(base_cfg)
    space.check_keys(base_cfg)
    fit_hypermodel = None
    if hypermodel_object is not None or uses_hypermodel(base_cfg):
        space, found, fit_hypermodel = _add_hypermodel(
            space,
            base_cfg,
            hypermodel_object,
            timeout=tuner_cfg.get("trial_timeout"),
            fit_kwargs=fit_kwargs,
        )
        plan.space = space
        if auto_objective and found.compiled:
            _auto_objective(cfg, found)
            plan.objective = {
                "name": str(tuner_cfg.objective.name),
                "direction": str(tuner_cfg.objective.direction),
            }
    plan.objective_overrides(base_cfg)
    if role.distributed and any(s in _strategy_target(base_cfg) for s in _MULTI_PROCESS):
        raise ConfigError(
            "strategy",
            "spans several processes; a distributed search runs one trial per tuner",
            value=_strategy_target(base_cfg),
            hint="use strategy=one_device or mirrored in the trials",
        )
    # keras-tuner reads its role from the environment (BaseTuner, OracleClient).
    os.environ.update(role.environment())

    oracle = oracles.build(tuner_cfg, hyperparameters=space.hyperparameters())
    project = run_dir / SEARCH_STATE
    with contextlib.ExitStack() as stack:
        if role.is_chief:
            # One owner per folder: refused (reads only) before anything in it changes,
            # then held for the whole search, so no other process runs its trials.
            allow_foreign = bool(
                OmegaConf.select(base_cfg, "trainer.allow_foreign_files", default=False)
            )
            accept_search_dir(run_dir, key=folder_key, allow_foreign_files=allow_foreign)
            stack.enter_context(run_lock.hold(run_dir, key=folder_key, kind="search"))
            if tuner_cfg.overwrite:
                for name in (SEARCH_STATE, "trials", "trials.csv", "best.yaml"):
                    path = run_dir / name
                    shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
            search_settings.check_resume(project, plan, str(tuner_cfg._target_))
            if on_accepted is not None:
                on_accepted()
        return _search(
            cfg,
            plan=plan,
            space=space,
            oracle=oracle,
            role=role,
            run_dir=run_dir,
            hypermodel_object=hypermodel_object,
            fit_kwargs=fit_kwargs,
            fit_hypermodel=fit_hypermodel,
        )


def _search(
    cfg: DictConfig,
    *,
    plan: TrialPlan,
    space: Space,
    oracle: Any,
    role: Role,
    run_dir: Path,
    hypermodel_object: Any,
    fit_kwargs: Mapping[str, Any] | None,
    fit_hypermodel: Any,
) -> SearchResult:
    """The search itself, once the folder is accepted (and held, on the chief)."""
    tuner_cfg = cfg.tuner
    distributed = tuner_cfg.distributed
    timeout = tuner_cfg.get("trial_timeout")
    tuner = KdistTuner(
        oracle=oracle,
        plan=plan,
        run_dir=run_dir,
        heartbeat=float(distributed.heartbeat),
        hypermodel=hypermodel_object,
        fit_hypermodel=fit_hypermodel,
        trial_timeout=None if timeout is None else float(timeout),
    )
    if role.is_chief:
        oracle.trial_ended = lambda _: results.write_tables(oracle, plan=plan, run_dir=run_dir)

    result = SearchResult(run_dir=run_dir, role=role, oracle=oracle)
    server = client = None
    try:
        if role.distributed and role.is_chief:
            assert role.address is not None
            server = OracleServer(
                oracle,
                bind=role.bind_address(),
                worker_timeout=float(distributed.worker_timeout),
                local_tuner=role.tuner_id if distributed.chief_runs_trials else None,
            ).start()
            tuner.save()
            # Wait for the other tuners, so that the chief does not take every trial
            # before they are up.
            if distributed.chief_runs_trials:
                count = role.expected_tuners  # the chief included
            else:
                count = max(role.expected_tuners - 1, 1)
            server.wait_for_tuners(count, timeout=float(distributed.connect_timeout))
            if distributed.chief_runs_trials:
                tuner.search()
            result.lost_tuners = server.drain(until_stopped=not distributed.chief_runs_trials)
        elif role.distributed:
            assert role.address is not None
            client = DeadlineOracleClient(
                oracle,
                address=role.address,
                tuner_id=role.tuner_id,
                timeout=float(distributed.timeout),
                connect_timeout=float(distributed.connect_timeout),
            )
            tuner.oracle = client
            _check_same_space(client, space)
            tuner.search()
        else:
            tuner.search(**dict(fit_kwargs or {}))
    finally:
        if server is not None:
            server.stop()
        if client is not None:
            client.close()

    if role.is_chief:
        result.trials = results.write_tables(oracle, plan=plan, run_dir=run_dir)
        result.best = results.write_best(run_dir / "best.yaml", oracle, plan=plan, run_dir=run_dir)
        result.stop_reason = oracle.stop_reason
        _write_experiment(run_dir, space, result.trials, oracle)
    return result


def _check_same_space(client: DeadlineOracleClient, space: Space) -> None:
    """A worker launched with other `tuner.space` settings than the chief stops at once."""
    remote = {hp.name for hp in client.get_space().space}
    if remote != set(space.names):
        raise ConfigError(
            "tuner.space",
            f"differs from the chief's ({', '.join(sorted(remote))})",
            value=", ".join(space.names),
            hint="give every process the same overrides",
        )


def _write_experiment(
    run_dir: Path, space: Space, rows: Sequence[Mapping[str, Any]], oracle: Any
) -> None:
    metric_names = {str(oracle.objective.name)}
    epochs = set()
    for trial in oracle.trials.values():
        metric_names.update(trial.metrics.metrics)
        if "tuner/epochs" in trial.hyperparameters.values:
            epochs.add(int(trial.hyperparameters.values["tuner/epochs"]))
    extra = {"trainer.epochs": sorted(epochs)} if epochs else {}
    hparams.write_experiment(run_dir / "trials", space=space, metrics=metric_names, extra=extra)
