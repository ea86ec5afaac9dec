"""The search space: config keys with Hydra sweep expressions, as keras-tuner hyperparameters.

`tuner.space` maps config keys to the sweep syntax of Hydra's override grammar (the same
one the Optuna sweeper reads), so one notation serves `kdist.tune` and Hydra sweepers:

```yaml
space:
  optimizer:
    learning_rate: tag(log, interval(1e-4, 1e-2))   # a log-uniform float
  model:
    units: choice([64], [128], [256])                # any values, lists too
    dropout: interval(0.0, 0.5)                      # a uniform float
    # tag(int, interval(1, 8)) is an integer, range(16, 129, 16) an integer grid
```

Nested mappings are joined with dots (`optimizer.learning_rate`); a `null` leaf removes
an entry (`tuner.space.model.dropout=null` on the command line). A trial's values become
Hydra overrides (`optimizer.learning_rate=0.0031`), so a trial is exactly
`python -m kdist.train <overrides>`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from kdist.config.errors import ConfigError

__all__ = ["Dimension", "Space", "format_value", "parse_value"]

_HINT = (
    "use choice(a, b, ...), interval(low, high), tag(log, interval(low, high)), "
    "tag(int, interval(low, high)) or range(start, stop, step)"
)
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_\-./]*")
_KEYWORDS = {"true", "false", "null", "inf", "nan", "none"}
_MISSING = object()


def format_value(value: Any) -> str:
    """A value as Hydra override text: `parse_value(format_value(v)) == v`.

    Args:
        value: None, a bool, number, string, list or mapping of those.

    Returns:
        The text to put after `key=` on a Hydra command line.
    """
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value)
    value = _plain(value)
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


def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def parse_value(text: str) -> Any:
    """The Python value of Hydra override text, e.g. `"[64,64]"` -> `[64, 64]`."""
    return _parser().parse_override(f"key={text}").value()


@dataclass(frozen=True)
class Dimension:
    """One tuned config key.

    Attributes:
        key: the dotted config key, e.g. `optimizer.learning_rate` (also the
            hyperparameter's name).
        expression: the sweep expression as written in `tuner.space`.
        kind: `choice`, `int`, `float` or `fixed`.
        values: a choice's values (override text when `encoded`), or the fixed value.
        low: the lower bound of an `int` or `float`.
        high: the upper bound (inclusive).
        step: the grid step, or `None` for a continuous range.
        log: whether values are sampled on a log scale.
        encoded: whether the choice values are override text (lists, mixed types),
            because keras-tuner choices hold only scalars of one type.
    """

    key: str
    expression: str
    kind: str
    values: tuple[Any, ...] = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    encoded: bool = False

    def override(self, value: Any) -> str:
        """The Hydra override that sets this key to a trial's `value`."""
        text = value if self.encoded else format_value(value)
        return f"{self.key}={text}"

    def display(self, value: Any) -> Any:
        """A trial's value as a scalar for tables and TensorBoard (override text if encoded)."""
        return _plain(value)

    def decode(self, value: Any) -> Any:
        """A trial's value as the config receives it (lists parsed back from text)."""
        return parse_value(value) if self.encoded else _plain(value)


def _plain(value: Any) -> Any:
    """Python's own scalar for a numpy one (oracles return np.float64, np.int64)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, str) else value


def _flatten(node: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(node, (DictConfig, ListConfig)):
        node = OmegaConf.to_container(node, resolve=True)
    if not isinstance(node, Mapping):
        raise ConfigError(
            prefix or "tuner.space",
            "must be a mapping of config keys to sweep expressions",
            value=node,
            hint=_HINT,
        )
    for name, value in node.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if isinstance(value, Mapping):
            _flatten(value, key, out)
        elif value is not None:
            out[key] = value


def _choice(key: str, expression: str, values: Sequence[Any]) -> Dimension:
    if not values:
        raise ConfigError(f"tuner.space.{key}", "is an empty choice", value=expression)
    scalars = all(isinstance(v, (str, int, float, bool)) for v in values)
    kinds = {type(v) for v in values}
    if scalars and kinds <= {int, float} and float in kinds:
        values = [float(v) for v in values]
        kinds = {float}
    if scalars and len(kinds) == 1 and len(set(values)) == len(values):
        return Dimension(key, expression, "choice", tuple(values))
    encoded = tuple(dict.fromkeys(format_value(v) for v in values))
    return Dimension(key, expression, "choice", encoded, encoded=True)


def _range_values(start: float, stop: float, step: float) -> list[float]:
    if step == 0:
        return []
    count = math.ceil(round((stop - start) / step, 9))
    return [start + i * step for i in range(max(count, 0))]


def _dimension(key: str, raw: Any) -> Dimension:
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from hydra.errors import HydraException

    where = f"tuner.space.{key}"
    if not isinstance(raw, str):
        value = raw.item() if hasattr(raw, "item") else raw
        if isinstance(value, (str, int, float, bool)):
            return Dimension(key, format_value(value), "fixed", (value,))
        return Dimension(key, format_value(value), "fixed", (format_value(value),), encoded=True)
    try:
        override = _parser().parse_override(f"{key}={raw}")
    except HydraException as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else "syntax error"
        raise ConfigError(where, f"cannot be parsed ({first})", value=raw, hint=_HINT) from None
    sweep = override.value()
    tags = set(getattr(sweep, "tags", ()) or ())
    unknown = tags - {"log", "int"}
    if unknown:
        raise ConfigError(
            where, f"has unknown tag(s) {', '.join(sorted(unknown))}", value=raw, hint=_HINT
        )
    if isinstance(sweep, ChoiceSweep):
        if tags:
            raise ConfigError(where, "takes no tags on a choice", value=raw, hint=_HINT)
        return _choice(key, raw, list(sweep.list))
    if isinstance(sweep, IntervalSweep):
        low, high = float(sweep.start or 0.0), float(sweep.end or 0.0)
        if not low < high:
            raise ConfigError(where, "needs low < high", value=raw, hint=_HINT)
        log = "log" in tags
        if log and low <= 0:
            raise ConfigError(where, "needs a positive lower bound for log sampling", value=raw)
        if "int" in tags:
            if low != int(low) or high != int(high):
                raise ConfigError(where, "needs integer bounds with tag(int, ...)", value=raw)
            return Dimension(key, raw, "int", low=int(low), high=int(high), log=log)
        return Dimension(key, raw, "float", low=low, high=high, log=log)
    if isinstance(sweep, RangeSweep):
        if tags:
            raise ConfigError(
                where, "takes no tags on a range; use interval(...)", value=raw, hint=_HINT
            )
        start, stop, step = sweep.start or 0, sweep.stop or 0, sweep.step or 0
        grid = _range_values(float(start), float(stop), float(step))
        if not grid or step <= 0:
            raise ConfigError(where, "is an empty range (or its step is not positive)", value=raw)
        if all(isinstance(v, int) for v in (start, stop, step)):
            return Dimension(key, raw, "int", low=int(start), high=int(grid[-1]), step=int(step))
        return Dimension(key, raw, "float", low=float(start), high=grid[-1], step=float(step))
    if override.is_sweep_override():
        raise ConfigError(where, "is not a sweep kdist can tune", value=raw, hint=_HINT)
    return _dimension(key, sweep) if not isinstance(sweep, str) else _fixed_text(key, sweep)


def _fixed_text(key: str, value: str) -> Dimension:
    return Dimension(key, format_value(value), "fixed", (value,))


class Space:
    """The search space of `tuner.space`, parsed and checked before TensorFlow starts.

    Args:
        dimensions: the tuned keys.

    Raises:
        ValueError: when two dimensions share a key.

    Example:

    ```python
    space = Space.from_config({"optimizer": {"learning_rate": "tag(log, interval(1e-4, 1e-2))"}})
    hps = space.hyperparameters()          # keras_tuner.HyperParameters
    space.overrides({"optimizer.learning_rate": 0.003})  # ["optimizer.learning_rate=0.003"]
    ```
    """

    def __init__(self, dimensions: Sequence[Dimension]):
        keys = [d.key for d in dimensions]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"`dimensions` repeat the key(s) {', '.join(duplicates)}.")
        self.dimensions: tuple[Dimension, ...] = tuple(dimensions)

    @classmethod
    def from_config(cls, node: Any) -> Space:
        """Parse a `tuner.space` node.

        Raises:
            ConfigError: naming `tuner.space.<key>` for an expression that does not parse
                or makes no sense (empty choice, low >= high, log with a bound <= 0).
        """
        flat: dict[str, Any] = {}
        _flatten(node if node is not None else {}, "", flat)
        if not flat:
            raise ConfigError(
                "tuner.space",
                "is empty: there is nothing to tune",
                hint="set e.g. tuner.space.optimizer.learning_rate='\"interval(1e-4,1e-2)\"' "
                "or pick a space with tuner/space=mlp",
            )
        return cls([_dimension(key, raw) for key, raw in flat.items()])

    def __iter__(self) -> Iterator[Dimension]:
        return iter(self.dimensions)

    def __len__(self) -> int:
        return len(self.dimensions)

    @property
    def keys(self) -> list[str]:
        """The tuned config keys, in order."""
        return [d.key for d in self.dimensions]

    def describe(self) -> dict[str, str]:
        """Key -> expression, as written (recorded with the search to check a resume)."""
        return {d.key: d.expression for d in self.dimensions}

    def hyperparameters(self) -> Any:
        """The space as `keras_tuner.HyperParameters`, one hyperparameter per key."""
        import keras_tuner

        hps = keras_tuner.HyperParameters()
        for d in self.dimensions:
            if d.kind == "choice":
                hps.Choice(d.key, list(d.values))
            elif d.kind == "int":
                assert d.low is not None and d.high is not None
                hps.Int(
                    d.key,
                    int(d.low),
                    int(d.high),
                    step=int(d.step) if d.step else None,
                    sampling="log" if d.log else "linear",
                )
            elif d.kind == "float":
                assert d.low is not None and d.high is not None
                hps.Float(d.key, d.low, d.high, step=d.step, sampling="log" if d.log else "linear")
            else:
                hps.Fixed(d.key, d.values[0])
        return hps

    def overrides(self, values: Mapping[str, Any]) -> list[str]:
        """Hydra overrides setting each tuned key to its value in `values`."""
        return [d.override(values[d.key]) for d in self.dimensions if d.key in values]

    def display(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Tuned key -> scalar value, for `trials.csv` and TensorBoard HParams."""
        return {d.key: d.display(values[d.key]) for d in self.dimensions if d.key in values}

    def decode(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Tuned key -> the value the config receives (lists parsed back)."""
        return {d.key: d.decode(values[d.key]) for d in self.dimensions if d.key in values}

    def owns(self, key: str) -> bool:
        """Whether a config error on `key` comes from a tuned key (so the trial's values)."""
        for d in self.dimensions:
            for a, b in ((key, d.key), (d.key, key)):
                if a == b or a.startswith((f"{b}.", f"{b}[")):
                    return True
        return False

    def check_keys(self, cfg: DictConfig) -> None:
        """Raise `ConfigError` for a tuned key that the training config does not have."""
        for d in self.dimensions:
            if OmegaConf.select(cfg, d.key, default=_MISSING) is _MISSING:
                raise ConfigError(
                    f"tuner.space.{d.key}",
                    f"tunes {d.key}, which is not a key of the training config",
                    hint="tune an existing key (e.g. optimizer.learning_rate), or add the "
                    f"key first with +{d.key}=<value>",
                )
