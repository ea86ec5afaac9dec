"""The hyperparameter values of `model.hp`, and their check against a declared space."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from kdist.config.errors import ConfigError
from kdist.models.hypermodel.target import HP_KEY, target_name

__all__ = ["check_values", "hp_values"]


def _flatten(node: Any, prefix: str, out: dict[str, Any]) -> None:
    for name, value in node.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if isinstance(value, Mapping):
            _flatten(value, key, out)
        else:
            out[key] = value


def hp_values(model_cfg: Any, *, key: str = "model") -> dict[str, Any]:
    """The hyperparameter values in `model.hp`, by name (nested keys joined with dots).

    Raises:
        ConfigError: naming `model.hp` when it is not a mapping.
    """
    node = model_cfg.get(HP_KEY) if isinstance(model_cfg, (DictConfig, dict)) else None
    if node is None:
        return {}
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    if not isinstance(node, Mapping):
        raise ConfigError(
            f"{key}.{HP_KEY}",
            "must map hyperparameter names to values",
            value=node,
            hint=f"e.g. ++{key}.{HP_KEY}.units=64",
        )
    out: dict[str, Any] = {}
    _flatten(node, "", out)
    return out


def _in_domain(hp: Any, value: Any) -> bool:
    from keras_tuner.engine import hyperparameters as hp_types

    if isinstance(hp, hp_types.Choice):
        return value in list(hp.values)
    if isinstance(hp, hp_types.Boolean):
        return isinstance(value, bool)
    if isinstance(hp, hp_types.Fixed):
        return bool(value == hp.value)
    if isinstance(hp, (hp_types.Int, hp_types.Float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(hp, hp_types.Int) and value != int(value):
            return False
        return bool(hp.min_value <= value <= hp.max_value)
    return True


def _describe(hp: Any) -> str:
    config = {k: v for k, v in hp.get_config().items() if k not in ("name", "conditions")}
    return f"{type(hp).__name__}({', '.join(f'{k}={v!r}' for k, v in config.items())})"


def check_values(hps: Any, given: Mapping[str, Any], *, target: Any, key: str) -> None:
    """Every given value names a declared hyperparameter and lies in its domain."""
    declared: dict[str, list[Any]] = {}
    for hp in hps.space:
        declared.setdefault(hp.name, []).append(hp)
    for name, value in given.items():
        if name not in declared:
            shown = ", ".join(declared) or "none"
            raise ConfigError(
                f"{key}.{HP_KEY}.{name}",
                f"is not a hyperparameter that {target_name(target)} declares",
                value=value,
                hint=f"it declares: {shown}",
            )
        if not any(_in_domain(hp, value) for hp in declared[name]):
            raise ConfigError(
                f"{key}.{HP_KEY}.{name}",
                "is outside the hyperparameter's domain",
                value=value,
                hint=f"{target_name(target)} declares {_describe(declared[name][0])}",
            )
