"""How a trial becomes a training job: the search's overrides plus the trial's values."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from kdist.tuning.override_text import format_value
from kdist.tuning.space import Space

__all__ = ["TrialPlan", "base_overrides", "trial_config_name"]

# The Hyperband oracle's budget for a trial, in epochs.
HYPERBAND_EPOCHS = "tuner/epochs"


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("~+")


def base_overrides(overrides: Sequence[str]) -> list[str]:
    """The search's command-line overrides that also apply to every trial.

    `tuner*` overrides configure the search, `hydra*` overrides Hydra, and `run_dir` the
    search's own folder; every trial gets its own folder instead.
    """
    kept = []
    for override in overrides:
        key = _key(override)
        if key in ("tuner", "run_dir", "hydra") or key.startswith(
            ("tuner.", "tuner/", "tuner@", "hydra.", "hydra/")
        ):
            continue
        kept.append(override)
    return kept


def trial_config_name(config_name: str, config_dir: str | Path | None) -> str:
    """The config trials compose: `train` for kdist's own `tune`, else the recipe itself."""
    own_tune = config_dir is None or not (Path(config_dir) / "tune.yaml").exists()
    return "train" if config_name == "tune" and own_tune else config_name


class TrialPlan:
    """Compose the training config of a trial, and the command that reproduces it.

    Args:
        space: the search space.
        overrides: the search's overrides for every trial (see `base_overrides`).
            Defaults to `()`.
        config_name: the config trials compose. Defaults to `"train"`.
        config_dir: a folder searched before kdist's configs (`-cd`). Defaults to `None`.
        objective: `{"name": ..., "direction": ...}` of the search, written into each
            trial's config when it differs from the config's own `objective`.
            Defaults to `None`.
    """

    def __init__(
        self,
        *,
        space: Space,
        overrides: Sequence[str] = (),
        config_name: str = "train",
        config_dir: str | Path | None = None,
        objective: Mapping[str, str] | None = None,
    ):
        if not config_name:
            raise ValueError("`config_name` must name a config, e.g. 'train'.")
        self.space = space
        self.base = list(overrides)
        self.config_name = config_name
        self.config_dir = None if config_dir is None else str(config_dir)
        self.objective = dict(objective or {})
        self._objective_overrides: list[str] | None = None

    def compose(self, overrides: Sequence[str] | None = None) -> DictConfig:
        """The training config with `overrides` applied (the search's own by default).

        Inside a Hydra app (`python -m kdist.tune`) it uses the app's Hydra, whose search
        path already holds `-cd`; elsewhere `kdist.compose`.
        """
        from hydra import compose as hydra_compose
        from hydra.core.global_hydra import GlobalHydra

        from kdist.config.compose import compose
        from kdist.process.interrupt import ctrl_c_kept

        every = list(self.base if overrides is None else overrides)
        with ctrl_c_kept():  # a Ctrl-C in Hydra's file reading stays one (not a failed trial)
            if GlobalHydra.instance().is_initialized():
                return hydra_compose(config_name=self.config_name, overrides=every)
            return compose(every, config_name=self.config_name, config_dir=self.config_dir)

    def objective_overrides(self, base_cfg: DictConfig | None = None) -> list[str]:
        """`objective.*` overrides when the search's objective differs from the config's."""
        if self._objective_overrides is None:
            cfg = base_cfg if base_cfg is not None else self.compose()
            current = cfg.get("objective") or {}
            self._objective_overrides = [
                f"objective.{key}={format_value(value)}"
                for key, value in self.objective.items()
                if current.get(key) != value
            ]
        return list(self._objective_overrides)

    def trial_overrides(self, values: Mapping[str, Any], fit: Sequence[str] = ()) -> list[str]:
        """Every override of a trial: the search's, then the trial's values (which replace
        a search override of the same key), Hyperband's epochs and `fit`: the config keys
        a `HyperModel.fit` gave `model.fit` in the trial (`kdist.tuning.fit_override`)."""
        extra = [*self.objective_overrides(), *self.space.overrides(values)]
        if HYPERBAND_EPOCHS in values:
            extra.append(f"trainer.epochs={int(values[HYPERBAND_EPOCHS])}")
        given = {_key(o) for o in fit}
        extra = [*(o for o in extra if _key(o) not in given), *fit]
        # A key the search adds (`+model.width=8`) is still new to the config in a trial.
        added = {_key(o): o[: len(o) - len(o.lstrip("+"))] for o in self.base if o[:1] == "+"}
        extra = [o if o[:1] == "+" else added.get(_key(o), "") + o for o in extra]
        replaced = {_key(o) for o in extra}
        return [*(o for o in self.base if _key(o) not in replaced), *extra]

    def hparams(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's tuned values as scalars (plus `trainer.epochs` under Hyperband)."""
        shown = self.space.display(values)
        if HYPERBAND_EPOCHS in values:
            shown["trainer.epochs"] = int(values[HYPERBAND_EPOCHS])
        return shown

    def command(self, overrides: Sequence[str]) -> str:
        """The shell command that trains a trial again: `python -m kdist.train ...`."""
        words = ["python", "-m", "kdist.train"]
        if self.config_dir is not None:
            words += ["-cd", self.config_dir]
        if self.config_name != "train" or self.config_dir is not None:
            words += ["-cn", self.config_name]
        return " ".join([*words, *(shlex.quote(o) for o in overrides)])

    def describe(self) -> dict[str, Any]:
        """What must not change between a search and its resume."""
        return {
            "config_name": self.config_name,
            "config_dir": self.config_dir,
            "overrides": list(self.base),
            "space": self.space.describe(),
            "objective": dict(self.objective),
        }
