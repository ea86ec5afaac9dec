"""Compose the kdist config outside a Hydra app, and turn Hydra's errors into one line."""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Iterator, Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_module, version
from hydra.core.config_search_path import SearchPathQuery
from hydra.errors import ConfigCompositionException, MissingConfigException
from hydra.initialize import get_gh_backup, restore_gh_from_backup
from omegaconf import DictConfig
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from kdist.compat import moved
from kdist.compat.tools_private import hydra_class, hydra_config_search_path
from kdist.config.errors import ConfigError
from kdist.config.groups import check_choices
from kdist.config.schema import register
from kdist.config.yaml_limits import check_config_folder
from kdist.process.interrupt import caused_by_ctrl_c

__all__ = ["CONFIG_MODULE", "compose", "format_hydra_error"]

CONFIG_MODULE = "kdist.conf"


def compose(
    overrides: Sequence[str] = (),
    *,
    config_name: str = "train",
    config_dir: str | Path | None = None,
) -> DictConfig:
    """Compose a kdist config the way `kdist train` (`python -m kdist.train`) does.

    One rule for the strategy everywhere: `conf/train.yaml`'s default (`one_device`) unless
    an override picks one (`strategy=mirrored`). `kdist.fit(strategy=None)` and
    `kdist.Experiment` (which takes a composed config) follow it, as the command line does.

    Args:
        overrides: Hydra overrides, e.g. `["model=cnn", "trainer.epochs=3"]`.
            Defaults to `()`.
        config_name: the top-level config, `train` or a recipe's name. Defaults to `"train"`.
        config_dir: an extra folder of configs searched first, e.g. `recipes`.
            Defaults to `None`.

    Returns:
        The composed config (the `hydra` node left out).

    Raises:
        ConfigError: for a typed schema picked as an option (`strategy=base_mirrored`).
        hydra.errors.ConfigCompositionException: for unknown keys, wrong types or options;
            `format_hydra_error` turns it into one line.
        KeyboardInterrupt: for a Ctrl-C, also where Hydra turns it into another error.

    Example:

    ```python
    cfg = kdist.compose(["model=cnn", "strategy=mirrored", "runtime.logical_devices=2"])
    ```
    """
    register()
    # The config may name module paths that moved (`_target_: kdist.sweep.SummaryCallback`).
    moved.install()
    check_choices(overrides)
    try:
        if config_dir is None:
            with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
                return hydra_compose(config_name=config_name, overrides=list(overrides))
        with _initialize_with_dir(Path(config_dir).resolve()):
            return hydra_compose(config_name=config_name, overrides=list(overrides))
    except Exception as error:
        # Hydra's config source turns a Ctrl-C in its `open` into an `UnboundLocalError`:
        # raised as the interrupt, which no caller takes for a config that does not compose.
        if caused_by_ctrl_c(error):
            raise KeyboardInterrupt from error
        raise


def check_config_dir(config_dir: Path) -> None:
    """A folder of configs (`-cd`, `config_dir`), before Hydra reads a file of it: a
    folder, with no alias bomb and no 2 GB file (`yaml_limits`)."""
    if not config_dir.is_dir():
        raise ConfigError("config_dir", "is not a folder", value=str(config_dir))
    check_config_folder(config_dir, key="config_dir")


@contextlib.contextmanager
def _initialize_with_dir(config_dir: Path) -> Iterator[None]:
    """Hydra initialised as `-cd config_dir` does: that folder first, then kdist's configs."""
    check_config_dir(config_dir)
    backup = get_gh_backup()
    version.setbase("1.3")
    search_path = hydra_config_search_path(str(config_dir))
    # After the user's folder and before the structured-config schemas, which must stay last.
    search_path.append("kdist", f"pkg://{CONFIG_MODULE}", anchor=SearchPathQuery(provider="main"))
    hydra_class().create_main_hydra2(  # type: ignore[attr-defined]
        task_name="train", config_search_path=search_path
    )
    try:
        yield
    finally:
        restore_gh_from_backup(backup)


def _schema_keys(object_type: object) -> list[str]:
    if isinstance(object_type, type) and is_dataclass(object_type):
        return [f.name for f in fields(object_type) if not f.name.startswith("_")]
    return []


def _did_you_mean(name: str, valid: list[str], *, prefix: str = "") -> str:
    """`did you mean X? ` for the valid name closest to `name` (difflib), else ``."""
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    return f"did you mean {prefix}{close[0]}? " if close else ""


def format_hydra_error(error: BaseException) -> str:
    """Reduce a Hydra or OmegaConf composition error to one line naming the key.

    Args:
        error: the exception raised by `compose` or by Hydra's app start-up.

    Returns:
        One line: the key, what is wrong and what would be valid.
    """
    causes: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(causes) < 10:
        causes.append(current)
        current = current.__cause__ or current.__context__

    for cause in causes:
        if isinstance(cause, MissingConfigException):
            match = re.search(r"Could not find '([^']+)'", str(cause))
            found = getattr(cause, "options", None) or []
            options = [o for o in found if not o.startswith("base_")]
            if match:
                missing = match.group(1)
                group, _, option = missing.rpartition("/")
                if group:
                    where = f"{group}={option}"
                    guess = _did_you_mean(option, options, prefix=f"{group}=")
                    hint = f"{guess}available: {', '.join(options)}" if options else ""
                    return f"{where}: no such option" + (f"; {hint}" if hint else "")
                return f"config '{missing}' not found" + (
                    f"; available: {', '.join(options)}" if options else ""
                )

    for cause in causes:
        if isinstance(cause, OmegaConfBaseException):
            full_key = getattr(cause, "full_key", None) or ""
            first = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
            if isinstance(cause, ConfigKeyError) or "not in" in first or "not in struct" in first:
                valid = _schema_keys(getattr(cause, "object_type", None))
                parent, _, name = str(full_key).rpartition(".")
                guess = _did_you_mean(name, valid, prefix=f"{parent}." if parent else "")
                hint = f"; {guess}valid keys: {', '.join(valid)}" if valid else ""
                return f"{full_key or first}: unknown key{hint}"
            if isinstance(cause, ValidationError):
                return f"{full_key}: {first}" if full_key else first
            return f"{full_key}: {first}" if full_key else first

    for cause in causes:
        if isinstance(cause, ConfigCompositionException):
            lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
            if "Config search path:" in lines:
                # Every folder searched, the user's own (`-cd`, an absolute `--config-path`)
                # included, on the one line.
                searched = [
                    p
                    for p in re.findall(r"path=(\S+)", str(cause))
                    if p not in ("pkg://hydra.conf", "structured://")
                ]
                return f"{lines[0]} Config search path: {', '.join(searched)}"
            return "; ".join(lines[:3])
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
