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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from kdist.config.errors import ConfigError
from kdist.tuning.override_text import format_value, override_parser, parse_value, plain

__all__ = ["Dimension", "Space"]

_HINT = (
    "use choice(a, b, ...), interval(low, high), tag(log, interval(low, high)), "
    "tag(int, interval(low, high)) or range(start, stop, step)"
)
_MISSING = object()


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
        hp_name: for a hyperparameter a hypermodel declares (`build_model(hp)`), its name
            in keras-tuner; `key` is then `model.hp.<hp_name>`. Empty for config keys.
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
    hp_name: str = ""

    @property
    def name(self) -> str:
        """The hyperparameter's name in keras-tuner's space (the config key, or `hp_name`)."""
        return self.hp_name or self.key

    def override(self, value: Any) -> str:
        """The Hydra override that sets this key to a trial's `value`."""
        text = value if self.encoded else format_value(value)
        # `model.hp` holds only the values given: add the key, or replace it.
        return f"{'++' if self.hp_name else ''}{self.key}={text}"

    def display(self, value: Any) -> Any:
        """A trial's value as a scalar for tables and TensorBoard (override text if encoded)."""
        return plain(value)

    def decode(self, value: Any) -> Any:
        """A trial's value as the config receives it (lists parsed back from text)."""
        return parse_value(value) if self.encoded else plain(value)


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
        override = override_parser().parse_override(f"{key}={raw}")
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


def _hp_dimension(hp: Any, key: str) -> Dimension:
    """A hyperparameter a hypermodel declares, as the dimension of `<key>.hp.<name>`."""
    from keras_tuner.engine import hyperparameters as hp_types

    config = {k: v for k, v in hp.get_config().items() if k not in ("name", "conditions")}
    expression = f"hp.{type(hp).__name__}({', '.join(f'{k}={v!r}' for k, v in config.items())})"
    where = f"{key}.hp.{hp.name}"
    log = getattr(hp, "sampling", "linear") in ("log", "reverse_log")
    if isinstance(hp, hp_types.Choice):
        values = tuple(plain(v) for v in hp.values)
        return Dimension(where, expression, "choice", values, hp_name=hp.name)
    if isinstance(hp, hp_types.Boolean):
        return Dimension(where, expression, "choice", (False, True), hp_name=hp.name)
    if isinstance(hp, hp_types.Int):
        step = int(hp.step) if hp.step and int(hp.step) != 1 else None
        return Dimension(
            where,
            expression,
            "int",
            low=hp.min_value,
            high=hp.max_value,
            step=step,
            log=log,
            hp_name=hp.name,
        )
    if isinstance(hp, hp_types.Float):
        return Dimension(
            where,
            expression,
            "float",
            low=hp.min_value,
            high=hp.max_value,
            step=hp.step,
            log=log,
            hp_name=hp.name,
        )
    return Dimension(where, expression, "fixed", (plain(hp.value),), hp_name=hp.name)


class Space:
    """The search space: `tuner.space`'s config keys, and a hypermodel's hyperparameters.

    Config keys are parsed and checked before TensorFlow starts (`from_config`); the
    hyperparameters a `build_model(hp)` declares join them once it has been built
    (`with_hypermodel`), each as the config key `model.hp.<name>`.

    Args:
        dimensions: the tuned keys.
        hypermodel: the hypermodel's `keras_tuner.HyperParameters` (with its conditional
            scopes), whose hyperparameters are among `dimensions`. Defaults to `None`.
        fit_names: the hypermodel's hyperparameters that only its `HyperModel.fit`
            declares: searched and recorded like the others, but no config override sets
            them (`kdist.tuning.fit_override`). Defaults to `()`.

    Raises:
        ValueError: when two dimensions share a key.

    Example:

    ```python
    space = Space.from_config({"optimizer": {"learning_rate": "tag(log, interval(1e-4, 1e-2))"}})
    hps = space.hyperparameters()          # keras_tuner.HyperParameters
    space.overrides({"optimizer.learning_rate": 0.003})  # ["optimizer.learning_rate=0.003"]
    ```
    """

    def __init__(
        self,
        dimensions: Sequence[Dimension],
        *,
        hypermodel: Any = None,
        fit_names: Sequence[str] = (),
    ):
        keys = [d.key for d in dimensions]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"`dimensions` repeat the key(s) {', '.join(duplicates)}.")
        self.dimensions: tuple[Dimension, ...] = tuple(dimensions)
        self.hypermodel = hypermodel
        self.fit_names = frozenset(fit_names)

    @classmethod
    def from_config(cls, node: Any, *, allow_empty: bool = False) -> Space:
        """Parse a `tuner.space` node.

        Args:
            node: the node.
            allow_empty: whether an empty space is valid (a hypermodel's hyperparameters
                come later). Defaults to `False`.

        Raises:
            ConfigError: naming `tuner.space.<key>` for an expression that does not parse
                or makes no sense (empty choice, low >= high, log with a bound <= 0).
        """
        flat: dict[str, Any] = {}
        _flatten(node if node is not None else {}, "", flat)
        if not flat and not allow_empty:
            raise ConfigError(
                "tuner.space",
                "is empty: there is nothing to tune",
                hint="set e.g. tuner.space.optimizer.learning_rate='\"interval(1e-4,1e-2)\"' "
                "or pick a space with tuner/space=mlp",
            )
        return cls([_dimension(key, raw) for key, raw in flat.items()])

    def with_hypermodel(
        self, hyperparameters: Any, *, key: str = "model", fit_names: Sequence[str] = ()
    ) -> Space:
        """This space and the hyperparameters a hypermodel declares.

        Args:
            hyperparameters: `kdist.models.hypermodel.search_space(...).hyperparameters`.
            key: the model node's config path. Defaults to `"model"`.
            fit_names: those of them only its `HyperModel.fit` declares. Defaults to `()`.

        Raises:
            ConfigError: naming `tuner.space.<key>.hp.<name>` for a config key that tunes
                a declared hyperparameter a second time.
        """
        found: dict[str, Dimension] = {}
        for hp in hyperparameters.space:
            found.setdefault(hp.name, _hp_dimension(hp, key))
        for d in self.dimensions:
            if d.key.startswith(f"{key}.hp.") and d.key[len(key) + 4 :] in found:
                name = d.key[len(key) + 4 :]
                raise ConfigError(
                    f"tuner.space.{d.key}",
                    f"tunes the hyperparameter {name!r} that {key}._target_ declares itself",
                    hint=f"remove it from tuner.space (the search tunes it), or fix it with "
                    f"++{key}.hp.{name}=<value>",
                )
        return Space(
            [*self.dimensions, *found.values()], hypermodel=hyperparameters, fit_names=fit_names
        )

    def __iter__(self) -> Iterator[Dimension]:
        return iter(self.dimensions)

    def __len__(self) -> int:
        return len(self.dimensions)

    @property
    def keys(self) -> list[str]:
        """The tuned config keys, in order."""
        return [d.key for d in self.dimensions]

    @property
    def names(self) -> list[str]:
        """The hyperparameters' names in keras-tuner's space, in order."""
        return [d.name for d in self.dimensions]

    def describe(self) -> dict[str, str]:
        """Key -> expression, as written (recorded with the search to check a resume)."""
        return {
            d.key: f"{d.expression} in fit" if d.hp_name in self.fit_names else d.expression
            for d in self.dimensions
        }

    def hyperparameters(self) -> Any:
        """The space as `keras_tuner.HyperParameters`, one hyperparameter per key."""
        import keras_tuner

        hps = keras_tuner.HyperParameters()
        for d in self.dimensions:
            if d.hp_name:
                continue  # the hypermodel's own, with its conditions, below
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
        if self.hypermodel is not None:
            hps.merge(self.hypermodel)
        return hps

    def overrides(self, values: Mapping[str, Any]) -> list[str]:
        """Hydra overrides setting each tuned key to its value in `values`.

        A hypermodel's hyperparameter that is inactive in a trial (a conditional scope
        not taken) has no value, and no override; nor has one that only its
        `HyperModel.fit` declares (`fit_names`: what `fit` does with it is no config key).
        """
        return [
            d.override(values[d.name])
            for d in self.dimensions
            if d.name in values and not (d.hp_name and d.hp_name in self.fit_names)
        ]

    def display(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Tuned key -> scalar value, for `trials.csv` and TensorBoard HParams."""
        return {d.key: d.display(values[d.name]) for d in self.dimensions if d.name in values}

    def decode(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Tuned key -> the value the config receives (lists parsed back)."""
        return {d.key: d.decode(values[d.name]) for d in self.dimensions if d.name in values}

    def hp_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The hypermodel's hyperparameters' values by name, as `build_model` reads them."""
        return {
            d.hp_name: d.decode(values[d.name])
            for d in self.dimensions
            if d.hp_name and d.name in values
        }

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
            if d.hp_name:
                continue  # `model.hp` holds only the values given
            if OmegaConf.select(cfg, d.key, default=_MISSING) is _MISSING:
                raise ConfigError(
                    f"tuner.space.{d.key}",
                    f"tunes {d.key}, which is not a key of the training config",
                    hint="tune an existing key (e.g. optimizer.learning_rate), or add the "
                    f"key first with +{d.key}=<value>",
                )
