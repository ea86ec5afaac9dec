"""Values as Hydra override text, and back: how a trial's values reach a config.

A trial's values become Hydra overrides (`optimizer.learning_rate=0.0031`), so a trial is
exactly `python -m kdist.train <overrides>`; `parse_value(format_value(v)) == v`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

__all__ = ["format_value", "override_parser", "parse_value", "plain"]

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_\-./]*")
_KEYWORDS = {"true", "false", "null", "inf", "nan", "none"}


def plain(value: Any) -> Any:
    """Python's own scalar for a numpy one (oracles return np.float64, np.int64)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, str) else value


def format_value(value: Any) -> str:
    """A value as Hydra override text: `parse_value(format_value(v)) == v`.

    Args:
        value: None, a bool, number, string, list or mapping of those.

    Returns:
        The text to put after `key=` on a Hydra command line.
    """
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value)
    value = plain(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value.lower() not in _KEYWORDS:
            return value
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        return f"'{escaped}'"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as a Hydra override")


def override_parser() -> Any:
    """Hydra's parser of command-line overrides (what a sweep expression is written in)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def parse_value(text: str) -> Any:
    """The Python value of Hydra override text, e.g. `"[64,64]"` -> `[64, 64]`."""
    return override_parser().parse_override(f"key={text}").value()
