"""`python -m kdist.tune`: a keras-tuner search whose trials are kdist training jobs.

Example:

```bash
python -m kdist.tune tuner=random tuner.max_trials=4 trainer.epochs=2
python -m kdist.tune tuner=bayesian strategy=mirrored runtime.logical_devices=2
python -m kdist.tune tuner=hyperband model=cnn tuner/space=cnn trainer.epochs=9
python -m kdist.tune ... hydra.run.dir=outputs/2026-11-21/10-00-00   # resume a search
python -m kdist.launch --workers 2 --module kdist.tune -- tuner.max_trials=8   # in parallel
python -m kdist.tune model=custom model._target_=my.build_model    # a keras-tuner hypermodel
```

From a notebook, `kdist.tune.search(build_model, x, y, validation_data=..., max_trials=4)`
(`kdist.tuning.notebook`) returns a tuner with `get_best_hyperparameters()`;
`kdist.tune.best_config(search_dir)` (`kdist.tuning.results.load_best`) reads a search's
best trial back as a training config, through kdist's trust check.

One owner per folder: a search holds its run folder's lock while it runs; a second search
there, a training run's folder (running or finished) and `kdist.train` into a search's
folder are refused in one line (`kdist.tuning.folder`).

Exit status: 0 when the search finished with a best trial; 1 when it stopped early (too
many failed trials in a row, the chief lost) or no trial completed; 2 for bad config.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from kdist.cluster import non_chief_overrides
from kdist.cluster import resolve as resolve_cluster
from kdist.command import prepare_command
from kdist.config import ConfigError, exit_with, register
from kdist.process.exit_codes import EXIT_FAILED
from kdist.process.interrupt import ctrl_c_kept, exit_on_ctrl_c
from kdist.process.log_level import requested_log_level
from kdist.process.runtime import quiet_tensorflow
from kdist.runs.layout import CONFIG, HYDRA, check_run_dir
from kdist.train import precheck
from kdist.tuning.folder import accept_search_dir

if TYPE_CHECKING:  # imported on first use, see `__getattr__`
    from kdist.tuning.notebook import Tuner, search
    from kdist.tuning.results import load_best as best_config

__all__ = ["Tuner", "best_config", "main", "search"]

log = logging.getLogger("kdist.tune")


def __getattr__(name: str) -> Any:
    """`kdist.tune.search` and `kdist.tune.Tuner` (`kdist.tuning.notebook`), and
    `kdist.tune.best_config` (`kdist.tuning.results.load_best`), imported on first use:
    the command line checks its config before TensorFlow starts."""
    if name in ("Tuner", "search"):
        from kdist.tuning import notebook

        return getattr(notebook, name)
    if name == "best_config":
        from kdist.tuning.results import load_best

        return load_best
    raise AttributeError(f"module 'kdist.tune' has no attribute {name!r}")


def _config_dir(hydra_cfg: Any) -> str | None:
    for source in hydra_cfg.runtime.config_sources:
        if source.provider == "command-line" and source.schema == "file":
            return str(source.path)
    return None


def _fail(message: str) -> None:
    print(f"kdist: tune: {message}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_FAILED)


def _report(result: Any) -> float | None:
    run_dir = result.run_dir
    completed = sum(1 for row in result.trials if row["status"] == "COMPLETED")
    print(f"trials: {len(result.trials)} ({completed} completed) in {run_dir / 'trials.csv'}")
    if result.lost_tuners:
        print(f"tuners lost during the search: {', '.join(result.lost_tuners)}")
    best = result.best
    if best is not None:
        objective = best["objective"]
        print(
            f"best trial {best['trial_id']}: {objective['name']} {objective['value']:.4f} "
            f"({objective['direction']}); {run_dir / 'best.yaml'}\n"
            f"reproduce it with: {best['command']}",
            flush=True,
        )
    if result.stop_reason:
        _fail(f"the search stopped early: {result.stop_reason}")
    if best is None:
        _fail(f"no trial completed; see the reasons in {run_dir / 'trials.csv'}")
    return float(best["objective"]["value"]) if best else None


@hydra.main(config_path="pkg://kdist.conf", config_name="tune", version_base="1.3")
def _app(cfg: DictConfig) -> float | None:
    # After the config checks: importing keras-tuner starts TensorFlow.
    from kdist.tuning import run as run_search
    from kdist.tuning.oracle_client import OracleError, OracleUnreachable
    from kdist.tuning.tuner import FatalConfigError

    hydra_cfg = HydraConfig.get()
    run_dir = Path(cfg.tuner.distributed.run_dir or hydra_cfg.runtime.output_dir)
    try:
        with ctrl_c_kept():  # past Hydra's report of the job's errors, to `main`'s one line
            result = run_search(
                cfg,
                run_dir=run_dir,
                overrides=list(hydra_cfg.overrides.task),
                config_name=str(hydra_cfg.job.config_name),
                config_dir=_config_dir(hydra_cfg),
                on_accepted=lambda: _write_hydra_files(run_dir, cfg),
            )
    except ConfigError as error:
        exit_with(error)
    except FatalConfigError as error:
        exit_with(error.error)
    except (OracleUnreachable, OracleError) as error:
        _fail(str(error))
    if not result.role.is_chief:
        log.info("tuner %s finished; the chief writes the results", result.role.tuner_id)
        return None
    return _report(result)


def _shared_run_dir(argv: list[str]) -> str | None:
    for arg in reversed(argv):
        if arg.startswith("hydra.run.dir="):
            return arg.split("=", 1)[1]
    return None


def _check_space_overrides(argv: list[str]) -> None:
    """A sweep expression for `tuner.space` must reach the tuner as a string: Hydra reads
    an unquoted `choice(...)` as a multirun sweep of its own."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or not key.lstrip("+~").startswith("tuner.space"):
            continue
        try:
            sweep = parser.parse_override(arg).is_sweep_override()
        except HydraException:
            continue  # Hydra reports it
        if sweep:
            exit_with(
                ConfigError(
                    key.lstrip("+~"),
                    "is a sweep expression that Hydra would read itself",
                    value=value,
                    hint=f"quote it for the tuner: '{key}=\"{value}\"'",
                )
            )


def _precheck(argv: list[str]) -> DictConfig | None:
    """`kdist.train.precheck` for the search's config, with a search's folder acceptance.

    A search folder holds the tuner's files (`trials/`, `trials.csv`, `keras_tuner/`, ...),
    which a training run's folder may not: `kdist.tuning.folder.accept_search_dir` refuses
    a folder another process holds or a training run's folder instead; the search checks
    a resume itself (`keras_tuner/search.yaml`, `kdist.tuning.driver`).
    """
    run_dir = _shared_run_dir(argv)
    cfg = precheck([a for a in argv if not a.startswith("hydra.run.dir=")], config_name="tune")
    if cfg is not None and run_dir is not None:
        try:
            check_run_dir("hydra.run.dir", run_dir)
            if resolve_cluster().is_chief:
                # Before Hydra opens the folder's tune.log: one owner per folder.
                accept_search_dir(
                    run_dir,
                    allow_foreign_files=bool(
                        OmegaConf.select(cfg, "trainer.allow_foreign_files", default=False)
                    ),
                )
        except ConfigError as error:
            exit_with(error)
    return cfg


def _write_hydra_files(run_dir: Path, cfg: DictConfig) -> None:
    """`.hydra/` as Hydra writes it, once the search is accepted (on the chief).

    kdist's configs set `hydra.output_subdir: null`, so that a refused command changes
    nothing in the folder (`kdist.train.accept_run_dir`).
    """

    from kdist.runs.fileio import write_text_atomic

    hydra_cfg = HydraConfig.get()
    folder = run_dir / HYDRA
    write_text_atomic(folder / CONFIG, OmegaConf.to_yaml(cfg))
    write_text_atomic(folder / "hydra.yaml", OmegaConf.to_yaml({"hydra": hydra_cfg}))
    overrides = OmegaConf.to_container(hydra_cfg.overrides.task)
    write_text_atomic(folder / "overrides.yaml", OmegaConf.to_yaml(overrides))


def _default_space(argv: list[str]) -> bool:
    """Whether the search uses conf/tune.yaml's default `tuner/space` (none chosen)."""
    from kdist.compat.tools_private import hydra_args_parser

    args, _ = hydra_args_parser().parse_known_args(argv)
    if args.config_name not in (None, "tune") or args.config_dir is not None:
        return False  # a recipe chooses its own space
    return not any(o.lstrip("~+").startswith("tuner/space") for o in args.overrides)


def main() -> None:
    """Entry point of `python -m kdist.tune` (and `kdist tune`)."""
    # Ctrl-C at any point, its first seconds included: one line and status 130.
    with exit_on_ctrl_c(_INTERRUPTED):
        _main()


def _main() -> None:
    register()
    prepare_command()
    argv = sys.argv[1:]
    # Before anything imports TensorFlow (checking `_target_` keys imports the models).
    quiet_tensorflow(requested_log_level(argv))
    _check_space_overrides(argv)
    try:
        info = resolve_cluster()
    except ConfigError as error:
        exit_with(error)
    if not info.is_chief:
        # Workers of a distributed search write trial folders into the shared run
        # directory; Hydra's own files there (.hydra/, tune.log) are the chief's.
        shared = _shared_run_dir(argv)
        if shared is None and not any(a.startswith("tuner.distributed.run_dir=") for a in argv):
            exit_with(
                ConfigError(
                    "hydra.run.dir",
                    f"is needed by {info.task_name} of a distributed search: the run "
                    "directory every process shares",
                    hint="pass hydra.run.dir=<dir> to every process (kdist.launch does)",
                )
            )
        if shared is not None:
            sys.argv.append(f"tuner.distributed.run_dir={shared}")
        sys.argv.extend(non_chief_overrides(info))
    cfg = _precheck(sys.argv[1:])
    if cfg is not None:
        from kdist.tuning.driver import check, uses_hypermodel

        if uses_hypermodel(cfg) and _default_space(sys.argv[1:]):
            # conf/tune.yaml's space is model=mlp's; a hypermodel declares its own.
            sys.argv.append("~tuner/space")
            cfg = _precheck(sys.argv[1:])
            assert cfg is not None
        try:
            check(cfg)
        except ConfigError as error:
            exit_with(error)
    _app()


_INTERRUPTED = (
    "kdist.tune: interrupted (Ctrl-C); the search stopped: run the same command again to resume it"
)


if __name__ == "__main__":
    main()
