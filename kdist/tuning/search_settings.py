"""What a search records when it starts (`keras_tuner/search.yaml`), and its resume check.

The chief writes the search's settings once, when it starts in a new folder: the config
name and folder (`-cd`), the trials' overrides, the space, the objective and the tuner. A
resumed search must have the same (`check_resume`), and `best.yaml`'s `config_dir` is
accepted only when it is the folder recorded here (`recorded_config_dir`,
`kdist.tuning.results.load_best`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from kdist.config.errors import ConfigError
from kdist.config.yaml_limits import load_yaml
from kdist.tuning.folder import SEARCH_SETTINGS, SEARCH_STATE
from kdist.tuning.plan import TrialPlan

__all__ = ["check_resume", "recorded_config_dir", "same_overrides"]

log = logging.getLogger(__name__)


def same_overrides(before: Any, now: Sequence[str]) -> bool:
    """Whether two lists of overrides set the same config: in any order, unless a key is
    set twice (the last one wins, so their order matters)."""
    if not isinstance(before, list):
        return False
    if sorted(map(str, before)) != sorted(now):
        return False
    keys = [o.split("=", 1)[0].lstrip("~+") for o in now]
    return len(set(keys)) == len(keys) or list(map(str, before)) == list(now)


def check_resume(project: Path, plan: TrialPlan, target: str) -> None:
    """Record the search's settings in `project` (its `keras_tuner/`), or, when they are
    there already, refuse to resume with others.

    Raises:
        ConfigError: naming `hydra.run.dir` and the first setting that changed.
    """
    settings = {**plan.describe(), "tuner": target}
    path = project / SEARCH_SETTINGS
    if path.is_file():
        before = load_yaml(path, key="hydra.run.dir") or {}
        for key, value in settings.items():
            if key == "overrides" and same_overrides(before.get(key), value):
                continue
            if before.get(key) != value:
                raise ConfigError(
                    "hydra.run.dir",
                    f"holds a search with other settings ({key} was {before.get(key)!r}, "
                    f"now {value!r})",
                    value=str(project.parent),
                    hint="resume with the same overrides, start afresh with "
                    "tuner.overwrite=true, or use another run directory",
                )
        log.info("resuming the search in %s", project.parent)
        return
    project.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(settings, sort_keys=False))


def recorded_config_dir(search_dir: Path, *, key: str) -> tuple[bool, str | None]:
    """The `config_dir` the search in `search_dir` recorded when it started.

    Returns:
        `(True, folder)` (`folder` is `None` for kdist's own configs), or `(False, None)`
        when the search recorded no settings.
    """
    path = search_dir / SEARCH_STATE / SEARCH_SETTINGS
    if not path.is_file() or path.is_symlink():
        return False, None
    settings = load_yaml(path, key=key)
    if not isinstance(settings, dict) or "config_dir" not in settings:
        return False, None
    value = settings["config_dir"]
    return True, None if value is None else str(value)
