"""`python -m kdist.train`: the Hydra app that trains one job (or a multirun of jobs).

Example:

```bash
python -m kdist.train strategy=mirrored runtime.logical_devices=2 model=cnn trainer.epochs=3
python -m kdist.train -m optimizer.learning_rate=1e-3,3e-3
python -m kdist.train -cd recipes -cn mnist_cnn_mirrored
```
"""

from __future__ import annotations

import atexit
import logging
import shutil
import sys
import tempfile
from typing import Any

import hydra
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from kdist import resume_check, run_lock
from kdist.cli import requested_log_level
from kdist.cluster import ClusterInfo
from kdist.cluster import resolve as resolve_cluster
from kdist.config import ConfigError, exit_with, register
from kdist.config.compose import compose, format_hydra_error
from kdist.config.validate import check_run_dir, validate
from kdist.exit_codes import EXIT_CHECKPOINT, EXIT_INTERRUPTED, EXIT_PS_UNAVAILABLE
from kdist.runtime import quiet_tensorflow

__all__ = ["main", "non_chief_overrides", "precheck", "run"]

log = logging.getLogger("kdist.train")


def precheck(argv: list[str], *, config_name: str = "train") -> DictConfig | None:
    """Compose and validate the command line's config before Hydra starts the job.

    Hydra reports composition errors with status 1 and a traceback hint; kdist wants
    status 2 and one line naming the key, before TensorFlow is imported. Multirun sweeps
    and Hydra's informational flags are left to Hydra.

    Args:
        argv: the command-line arguments (without the program name).
        config_name: the app's default config. Defaults to `"train"`.

    Returns:
        The composed config, or `None` when the command is not a single run.
    """
    args, _ = get_args_parser().parse_known_args(argv)
    informational = args.help or args.hydra_help or args.cfg or args.info
    if args.multirun or informational or args.shell_completion:
        return None
    try:
        cfg = compose(
            args.overrides,
            config_name=args.config_name or config_name,
            config_dir=args.config_dir,
        )
    except ConfigError as error:
        exit_with(error)
    except Exception as error:  # Hydra and OmegaConf raise many types; all are bad input
        exit_with(format_hydra_error(error))
    try:
        validate(cfg)
        check_run_dir("hydra.run.dir", _run_dir_override(args.overrides) or "outputs")
    except ConfigError as error:
        exit_with(error)
    return cfg


def _run_dir_override(overrides: list[str]) -> str | None:
    for override in overrides:
        key, sep, value = override.partition("=")
        if sep and key.lstrip("+") == "hydra.run.dir":
            return value
    return None


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train the job `cfg` describes in Hydra's output directory.

    The chief holds the run folder's lock (`kdist.run_lock`) while it trains, and a run
    that finds checkpoints in its folder must have the settings they were trained with
    (`kdist.resume_check`). Ctrl-C exits with status 130 and one line (a backup is saved
    first when training had started, see `kdist.callbacks.preemption`).

    Returns:
        The run's `metrics.json` content.
    """
    run_dir = HydraConfig.get().runtime.output_dir if HydraConfig.initialized() else None
    try:
        if run_dir is None:
            return _train(cfg, None)
        is_chief = resolve_cluster().is_chief
        with run_lock.hold(run_dir, enabled=is_chief):
            resume_check.check_resume(run_dir, cfg)
            if is_chief:
                resume_check.save_config(run_dir, cfg)
            return _train(cfg, run_dir)
    except ConfigError as error:
        exit_with(error)
    except KeyboardInterrupt:
        message = "interrupted (Ctrl-C), no backup saved now; a re-run resumes from the last one"
        log.warning("%s", message)
        print(f"kdist: {message}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None


def _train(cfg: DictConfig, run_dir: str | None) -> dict[str, Any]:
    from kdist.callbacks.preemption import save_on_ctrl_c
    from kdist.experiment import Experiment

    save_on_ctrl_c(True)

    try:
        experiment = Experiment(cfg, run_dir=run_dir)
        experiment.build_model()
    except ConfigError as error:
        exit_with(error)
    from kdist.callbacks.guards import EXIT_NON_FINITE, NonFiniteLossError
    from kdist.engine.ps_runner import ParameterServerUnavailableError
    from kdist.engine.state import CheckpointError

    try:
        experiment.fit()
    except ConfigError as error:
        exit_with(error)
    except NonFiniteLossError as error:
        log.error("%s", error)
        print(f"kdist: error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_NON_FINITE) from None
    except CheckpointError as error:
        log.error("%s", error)
        print(f"kdist: checkpoint error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_CHECKPOINT) from None
    except ParameterServerUnavailableError as error:
        # Already logged by the runner; one line on stderr, no traceback.
        print(f"kdist: error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_PS_UNAVAILABLE) from None
    return experiment.metrics()


@hydra.main(config_path="pkg://kdist.conf", config_name="train", version_base="1.3")
def _app(cfg: DictConfig) -> float | None:
    metrics = run(cfg)
    accuracy = metrics["validation"].get("accuracy")
    if accuracy is not None:
        print(f"validation accuracy: {accuracy:.4f}", flush=True)
    # The configured objective, so Hydra sweepers (Optuna, ...) can optimise it.
    value = metrics.get("objective", {}).get("value")
    return None if value is None else float(value)


def non_chief_overrides(info: ClusterInfo, *, multirun: bool = False) -> list[str]:
    """Hydra overrides that keep a non-chief task from writing the run directory.

    Hydra writes `.hydra/` and `train.log` into its output folder in every process. Only
    the chief may write the run's files, so the other tasks get no `.hydra/` copy and
    console-only logging; under multirun their sweep folder is a temporary one (removed
    at exit).

    Args:
        info: this process's cluster position.
        multirun: the command is a Hydra multirun. Defaults to `False`.

    Returns:
        Overrides to append to the command line (empty on the chief).
    """
    if info.is_chief:
        return []
    quiet = ["hydra.output_subdir=null", "hydra/job_logging=stdout"]
    if not multirun:
        # Same run directory as the chief (to read its backups), but nothing written.
        return quiet
    # A sweep writes multirun.yaml into its folder: give other tasks their own.
    scratch = tempfile.mkdtemp(prefix=f"kdist-{info.task_type}{info.task_index}-hydra-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    return [f"hydra.sweep.dir={scratch}", *quiet]


def main() -> None:
    """Entry point of `python -m kdist.train`."""
    register()
    # Before anything imports TensorFlow (checking `_target_` keys imports the models).
    quiet_tensorflow(requested_log_level(sys.argv[1:]))
    try:
        info = resolve_cluster()
    except ConfigError as error:
        exit_with(error)
    multirun = any(arg in ("-m", "--multirun") for arg in sys.argv[1:])
    sys.argv.extend(non_chief_overrides(info, multirun=multirun))
    precheck(sys.argv[1:])
    _app()


if __name__ == "__main__":
    main()
