"""`python -m kdist.train`: the Hydra app that trains one job (or a multirun of jobs).

Example:

```bash
python -m kdist.train strategy=mirrored runtime.logical_devices=2 model=cnn trainer.epochs=3
python -m kdist.train -m optimizer.learning_rate=1e-3,3e-3
python -m kdist.train -cd recipes -cn mnist_cnn_mirrored
```
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import configure_log, run_job
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from kdist.cluster import ClusterInfo, non_chief_overrides
from kdist.cluster import resolve as resolve_cluster
from kdist.command import prepare_command
from kdist.compat import moved
from kdist.compat.tools_private import app_hydra, hydra_args_parser, hydra_run_parts
from kdist.config import ConfigError, exit_with, register
from kdist.config.compose import check_config_dir, compose, format_hydra_error
from kdist.config.groups import check_choices
from kdist.config.yaml_limits import config_folder
from kdist.launcher.sweep_launchers import sweep_launcher_overrides
from kdist.process.exit_codes import (
    EXIT_CHECKPOINT,
    EXIT_CONFIG_ERROR,
    EXIT_INTERRUPTED,
    EXIT_PS_UNAVAILABLE,
    EXIT_WRITE_FAILED,
)
from kdist.process.interrupt import exit_on_ctrl_c
from kdist.process.log_level import requested_log_level, stop_file_logging
from kdist.process.runtime import quiet_tensorflow
from kdist.run_setup import (
    RunSetup,
    accept_run_dir,
    hand_over,
    known_cluster,
    setup_run,
    take_over,
    take_run_dir,
)
from kdist.runs import resume_check
from kdist.runs.fileio import write_text_atomic
from kdist.runs.layout import (
    BACKUP,
    CHECKPOINTS,
    CONFIG,
    HYDRA,
    SAVE_FOLDERS,
    check_run_dir,
    clean_leftovers,
)
from kdist.runs.refusal import as_it_was_on_refusal
from kdist.runs.sweep import set_chief, train_job

__all__ = [
    "accept_run_dir",
    "hydra_output_dir",
    "main",
    "non_chief_overrides",
    "precheck",
    "run",
    "run_composed",
]

log = logging.getLogger("kdist.train")


def precheck(
    argv: list[str],
    *,
    config_name: str = "train",
    cluster: ClusterInfo | None = None,
    held: contextlib.ExitStack | None = None,
) -> DictConfig | None:
    """Compose and validate the command line's config before Hydra starts the job.

    Hydra reports composition errors with status 1 and a traceback hint; kdist wants
    status 2 and one line naming the key, before TensorFlow is imported. Multirun sweeps
    and Hydra's informational flags are left to Hydra.

    With `held`, this is the run's setup, made once (`kdist.run_setup`): a named run
    folder's lock is taken (held until `held` closes) and its resume checked under it,
    and the setup is handed to the job Hydra starts next (`run`). The config is then
    composed as `hydra.main` composes it, once (`kdist train` runs Hydra's job on it,
    `main`), unless a relative `--config-path` names the folder (left to Hydra's app).

    Args:
        argv: the command-line arguments (without the program name).
        config_name: the app's default config. Defaults to `"train"`.
        cluster: this process's cluster, resolved with `kdist.cluster.resolve`'s defaults.
            Defaults to `None`: resolved here.
        held: where the run folder's lock is held for the run. Defaults to `None`: the
            checks alone, nothing held or handed on.

    Returns:
        The composed config, or `None` when the command is not a single run.
    """
    args, _ = hydra_args_parser().parse_known_args(argv)
    try:
        check_choices(args.overrides)  # multiruns too: a sweep must not pick a schema
    except ConfigError as error:
        exit_with(error)
    informational = args.help or args.hydra_help or args.cfg or args.info
    if args.multirun or informational or args.shell_completion:
        return None
    _COMPOSED.clear()
    folder = args.config_dir or config_folder(args.config_path)
    try:
        if held is not None and (args.config_path is None or folder is not None):
            if folder is not None:
                check_config_dir(Path(folder).resolve())
            name = args.config_name or config_name
            cfg = _compose_app(args.overrides, name, args.config_path, args.config_dir)
        else:
            cfg = compose(
                args.overrides,
                config_name=args.config_name or config_name,
                config_dir=args.config_dir or config_folder(args.config_path),
            )
    except ConfigError as error:
        exit_with(error)
    except Exception as error:  # Hydra and OmegaConf raise many types; all are bad input
        exit_with(format_hydra_error(error))
    named = _run_dir_override(args.overrides)
    try:
        setup = setup_run(cfg, cluster=cluster)
        check_run_dir("hydra.run.dir", named or "outputs")
        if named and setup.cluster.is_chief:
            # Before Hydra opens the folder's train.log (a link there would be followed).
            accept_run_dir(named, cfg)
            if held is None:
                resume_check.check_resume(named, cfg)
            else:
                setup = take_run_dir(named, setup, held)
    except ConfigError as error:
        exit_with(error)
    if held is not None:
        hand_over(setup)
    return cfg


# `hydra.main`'s Hydra, the config it composed (with its `hydra` node) and its name, for
# the job `kdist train` runs on it (`precheck`, `main`).
_COMPOSED: list[Any] = []


def _compose_app(
    overrides: list[str], config_name: str, config_path: str | None, config_dir: str | None
) -> DictConfig:
    """The run's config, composed once as `hydra.main` composes it (`kdist.compat`), with
    `--config-path` (an absolute one) and `--config-dir` as Hydra's app takes them."""
    register()
    moved.install()  # the config may name module paths that moved
    hydra = app_hydra("train", config_path or CONFIG_PATH, config_dir)
    full = hydra.compose_config(
        config_name=config_name,
        overrides=list(overrides),
        run_mode=RunMode.RUN,
        with_log_configuration=False,
    )
    _COMPOSED[:] = [hydra, full, config_name]
    cfg = copy.deepcopy(full)  # the job's config, as Hydra's `run_job` gives it
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    return cfg


def run_composed(
    hydra: Any, cfg: Any, config_name: str, task: Callable[[Any], Any], logging: bool = True
) -> Any:
    """`Hydra.run` (the run of `hydra.main`) on the config `_compose_app` made: Hydra's
    logging, callbacks and job (its output folder, its log file), without composing it
    again; a job's exception is reported as `hydra.main` reports it."""
    callbacks_class, report = hydra_run_parts()

    def run() -> Any:
        if logging:
            configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
        if cfg.hydra.mode is None:
            cfg.hydra.mode = RunMode.RUN
        callbacks = callbacks_class(cfg)
        callbacks.on_run_start(config=cfg, config_name=config_name)
        context = HydraContext(config_loader=hydra.config_loader, callbacks=callbacks)
        done = run_job(
            hydra_context=context,
            task_function=task,
            config=cfg,
            job_dir_key="hydra.run.dir",
            job_subdir_key=None,
            configure_logging=logging,
        )
        callbacks.on_run_end(config=cfg, config_name=config_name, job_return=done)
        return done.return_value  # re-raises the job's exception

    return report(run)


def _write_run_config(run_dir: str, cfg: DictConfig) -> None:
    """`.hydra/` as Hydra writes it (config, hydra, overrides), once the run is accepted.

    Hydra would write it before the job starts (`hydra.output_subdir`, null in kdist's
    config), so that a refused run would already have replaced the folder's config.
    """
    folder = Path(run_dir) / HYDRA
    hydra_cfg = HydraConfig.get()
    write_text_atomic(folder / CONFIG, OmegaConf.to_yaml(cfg))
    write_text_atomic(folder / "hydra.yaml", OmegaConf.to_yaml({"hydra": hydra_cfg}))
    overrides = OmegaConf.to_container(hydra_cfg.overrides.task)
    write_text_atomic(folder / "overrides.yaml", OmegaConf.to_yaml(overrides))
    resume_check.save_config(run_dir, cfg)


def _run_dir_override(overrides: list[str]) -> str | None:
    for override in overrides:
        key, sep, value = override.partition("=")
        if sep and key.lstrip("+") == "hydra.run.dir":
            return value
    return None


def hydra_output_dir() -> str | None:
    """The output folder of the Hydra job this process runs, or `None` outside one.

    A Hydra config without a job's output folder (Hydra's help path, `kdist help train`,
    composed it in this process) is no Hydra job: the run is a notebook's.
    """
    if not HydraConfig.initialized():
        return None
    hydra: Any = HydraConfig.get()  # a DictConfig typed as Hydra's dataclass
    return OmegaConf.select(hydra, "runtime.output_dir", default=None)


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train the job `cfg` describes in Hydra's output directory.

    The chief holds the run folder's lock (`kdist.runs.lock`) while it trains, and a run
    that finds checkpoints in its folder must have the settings they were trained with
    (`kdist.runs.resume_check`). Ctrl-C exits with status 130 and one line (a backup is saved
    first when training had started, see `kdist.callbacks.guards`).

    Returns:
        The run's `metrics.json` content.
    """
    return _run(cfg)[0]


def _run(cfg: DictConfig) -> tuple[dict[str, Any], RunSetup | None]:
    """`run`, with the run's setup (`None` when it was refused before it was made)."""
    run_dir = hydra_output_dir()
    setup = take_over()  # `precheck`'s, made before Hydra started this job
    try:
        if setup is None:
            setup = setup_run(cfg, cluster=known_cluster())  # a sweep's job
        setup = dataclasses.replace(setup, job=train_job())  # overrides, sweep
        # Hydra composed its own config for this job (its folder, its logging): the run
        # trains on the one `precheck` composed and checked, the same overrides.
        cfg = setup.cfg
        if run_dir is None:
            return _train(setup, None), setup
        is_chief = setup.cluster.is_chief
        set_chief(is_chief)  # the multirun summary's row is the chief's to write
        if not is_chief:
            stop_file_logging(run_dir)
        with contextlib.ExitStack() as held:
            if is_chief and not setup.resumed_in(run_dir):
                accept_run_dir(run_dir, cfg)  # reads only: a refused run changes nothing
                setup = take_run_dir(run_dir, setup, held)
            # A check that needs the strategy, the model or the data refuses the run
            # after its config was written: the folder is put back, byte for byte.
            with as_it_was_on_refusal(run_dir, enabled=is_chief):
                return _train(setup, run_dir, write_config=is_chief), setup
    except ConfigError as error:
        # A run refused here never removes the train.log that Hydra opened: another run
        # that took the folder since the check before Hydra may have opened it too.
        exit_with(error)
    except KeyboardInterrupt:
        message = "interrupted (Ctrl-C), no backup saved now; a re-run resumes from the last one"
        log.warning("%s", message)
        print(f"kdist: {message}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None


def _train(setup: RunSetup, run_dir: str | None, *, write_config: bool = False) -> dict[str, Any]:
    from kdist.callbacks.guards import save_on_ctrl_c
    from kdist.data.checks import check_batch_memory
    from kdist.experiment import Experiment

    save_on_ctrl_c(True)
    cfg = setup.cfg
    try:
        experiment = Experiment(cfg, run_dir=run_dir, setup=setup)
        # Config checks that need the data (not the model), before the folder changes.
        check_batch_memory(experiment.source, experiment.plan.global_batch_size)
        if write_config and run_dir is not None:
            _write_run_config(run_dir, cfg)
        experiment.build_model()
    except ConfigError as error:
        exit_with(error)
    import tensorflow as tf

    from kdist.callbacks.guards import EXIT_NON_FINITE, NonFiniteLossError
    from kdist.data.tfrecords.checks import corrupt_file_message
    from kdist.engine.checkpoint import CheckpointWriteError
    from kdist.engine.ps_runner import ParameterServerUnavailableError
    from kdist.engine.state import CheckpointError
    from kdist.runs.disk_full import DiskFullError

    try:
        experiment.fit()
    except ConfigError as error:
        exit_with(error)
    except CheckpointWriteError as error:
        _stop_on_write_error(str(error), experiment.run_dir)
    except OSError as error:
        if error.errno not in _DISK_ERRORS:
            raise
        said = str(error) if isinstance(error, DiskFullError) else None
        _stop_on_write_error(
            said or f"writing {error.filename or 'a file'} failed: {error}", experiment.run_dir
        )
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
        message = corrupt_file_message(error)
        if message is None:
            raise
        log.error("%s", message)
        print(f"kdist: data error: {message}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_CONFIG_ERROR) from None
    except NonFiniteLossError as error:
        message = f"{error} ({_what_is_saved(experiment.run_dir)})"
        log.error("%s", message)
        print(f"kdist: error: {message}", file=sys.stderr, flush=True)
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


# A full disk or quota, a read-only file system.
_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def _stop_on_write_error(message: str, run_dir: Path) -> NoReturn:
    """Exit 6 with one line: what failed and which backup is intact; no `*_temp` left."""
    for folder in SAVE_FOLDERS:
        clean_leftovers(Path(run_dir) / folder)
    text = f"{message}; {_what_is_saved(run_dir).replace('holds finite weights', 'is intact')}"
    log.error("%s", text)
    print(f"kdist: write error: {text}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_WRITE_FAILED) from None


def _what_is_saved(run_dir: Path) -> str:
    """What a run stopped on non-finite values leaves: what a re-run resumes from, or none.

    A re-run resumes from `backup/` when it holds a checkpoint, else from `checkpoints/`.
    """
    from kdist.engine.checkpoint import finish_writes
    from kdist.engine.state import checkpoints_in

    finish_writes()  # a backup of finite weights still being written is complete now
    for folder, what in ((BACKUP, "backup"), (CHECKPOINTS, "checkpoint")):
        found = checkpoints_in(Path(run_dir) / folder)
        if found:
            return f"the newest {what}, step {found[0][0]}, holds finite weights"
    return "no backup was saved before it: a re-run starts afresh"


CONFIG_PATH = "pkg://kdist.conf"


def _job(cfg: DictConfig) -> float | None:
    metrics, setup = _run(cfg)
    accuracy = metrics["validation"].get("accuracy")
    if accuracy is not None:
        print(f"validation accuracy: {accuracy:.4f}", flush=True)
    hydra_cfg = HydraConfig.get()
    chief = setup is None or setup.cluster.is_chief
    if hydra_cfg.mode != RunMode.MULTIRUN and chief:
        # As a multirun ends with where its summary is (kdist.runs.sweep.where_message).
        print(f"kdist: run done; its folder {hydra_cfg.runtime.output_dir}", flush=True)
    # The configured objective, so Hydra sweepers (Optuna, ...) can optimise it.
    value = metrics.get("objective", {}).get("value")
    return None if value is None else float(value)


_app = hydra.main(config_path=CONFIG_PATH, config_name="train", version_base="1.3")(_job)


def main() -> None:
    """Entry point of `python -m kdist.train` (and `kdist train`)."""
    # Ctrl-C before training starts (TensorFlow's import, Hydra's composition): one line.
    with exit_on_ctrl_c(_INTERRUPTED):
        _main()


_INTERRUPTED = (
    "kdist.train: interrupted (Ctrl-C); run the same command again to resume from its last "
    "backup, if any"
)


def _main() -> None:
    register()
    prepare_command()
    # Before anything imports TensorFlow (checking `_target_` keys imports the models).
    quiet_tensorflow(requested_log_level(sys.argv[1:]))
    try:
        info = resolve_cluster()
        # A multirun's launcher (joblib, submitit): checked and bounded before any job starts.
        sys.argv.extend(sweep_launcher_overrides(sys.argv[1:]))
    except ConfigError as error:
        exit_with(error)
    multirun = any(arg in ("-m", "--multirun") for arg in sys.argv[1:])
    sys.argv.extend(non_chief_overrides(info, multirun=multirun))
    hand_over(cluster=info)  # a sweep's jobs in this process share it
    with contextlib.ExitStack() as held:  # a named run folder's lock, for the whole run
        precheck(sys.argv[1:], cluster=info, held=held)
        if _COMPOSED:  # a single run: Hydra's job on the config composed once
            app, full, config_name = _COMPOSED
            run_composed(app, full, config_name, _job)
        else:  # a sweep, Hydra's flags, another folder of configs: Hydra's app
            _app()


if __name__ == "__main__":
    main()
