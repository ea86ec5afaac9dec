"""keras-tuner's `HyperModel.fit`: a hypermodel that tunes `fit`'s arguments, run by kdist.

keras-tuner's guides tune `fit` with a `HyperModel` subclass (its tuner calls
`hypermodel.fit(hp, model, *args, **kwargs)` in `Tuner._build_and_fit_model`):

```python
class MyHyperModel(keras_tuner.HyperModel):
    def build(self, hp):
        ...
    def fit(self, hp, model, *args, **kwargs):
        return model.fit(*args, batch_size=hp.Choice("batch_size", [16, 32]), **kwargs)
```

kdist calls that `fit` in every trial with the trial's model, whose `model.fit` trains
through kdist (`Experiment.fit` of the trial's run folder: every strategy, kdist's
callbacks and outputs); what `fit` returns feeds the objective as in keras-tuner
(`to_metrics`). The hyperparameters `fit` declares are found before the first trial, as
keras-tuner finds `build`'s (`probe`: `fit` is called with the defaults and stopped where it
calls `model.fit`), so they are searched and recorded like the others (`trials.csv`,
`best.yaml`'s `hp`); the arguments it gives `model.fit` that are config keys
(`batch_size` is `trainer.global_batch_size`, ...) join the trial's overrides, so that
`best.yaml`'s command trains the best trial again with them (`config_overrides`).

A `fit` that never calls `model.fit` (a loop of its own) is refused before the first trial:
kdist trains a trial only through `model.fit`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kdist.config.errors import ConfigError
from kdist.tuning.override_text import format_value

__all__ = [
    "FitHyperModel",
    "config_overrides",
    "overrides_fit",
    "probe",
    "redirect_fit",
    "to_metrics",
]

# `model.fit`'s arguments that are config keys of the trial (`Experiment.fit`'s meaning).
FIT_KEYS = {
    "batch_size": "trainer.global_batch_size",
    "epochs": "trainer.epochs",
    "steps_per_epoch": "trainer.steps_per_epoch",
    "validation_freq": "trainer.validation_freq",
    "shuffle": "data.shuffle",
    "class_weight": "trainer.class_weight",
}
# Arguments that do not change what is trained.
_NEUTRAL = ("callbacks", "verbose")
# The model's methods that train or run it: the probe stops at the first one called.
_RUNS = ("fit", "evaluate", "predict", "train_on_batch", "test_on_batch", "predict_on_batch")


class _Probed(BaseException):
    """Raised where the probed `fit` calls the model (a BaseException: a `fit` that
    catches `Exception` around `model.fit` does not swallow it)."""


@dataclass(frozen=True)
class FitHyperModel:
    """A hypermodel whose class overrides `keras_tuner.HyperModel.fit`.

    Attributes:
        instance: the `keras_tuner.HyperModel` instance whose `build` and `fit` trials call.
        names: the hyperparameters `fit` declares that `build` does not.
        hyperparameters: `build`'s and `fit`'s hyperparameters together.
    """

    instance: Any
    names: tuple[str, ...]
    hyperparameters: Any

    @property
    def label(self) -> str:
        cls = type(self.instance)
        return f"{cls.__module__}.{cls.__qualname__}.fit"


def overrides_fit(hypermodel: Any) -> bool:
    """Whether `hypermodel` (an instance or a class) overrides `keras_tuner.HyperModel.fit`."""
    import keras_tuner

    cls = hypermodel if isinstance(hypermodel, type) else type(hypermodel)
    if not (isinstance(cls, type) and issubclass(cls, keras_tuner.HyperModel)):
        return False
    return getattr(cls, "fit", None) is not keras_tuner.HyperModel.fit


@contextmanager
def redirect_fit(
    model: Any, fit: Callable[..., Any], *, others: Callable[..., Any] | None = None
) -> Iterator[None]:
    """Within the block, `model.fit` is `fit` (and the model's other run methods `others`).

    The methods are set on the instance and removed afterwards: the model stays the
    user's own object (`isinstance` holds, every other attribute is its own).
    """
    names = ["fit", *(n for n in _RUNS if n != "fit" and others is not None)]
    for name in names:
        setattr(model, name, fit if name == "fit" else others)
    try:
        yield
    finally:
        for name in names:
            if name in vars(model):
                delattr(model, name)


def _text(error: BaseException) -> str:
    return " ".join(str(error).split()) or "no message"


def probe(
    instance: Any,
    space: Any,
    *,
    build: Callable[[Any], Any],
    fit_args: Sequence[Any] = (),
    fit_kwargs: Mapping[str, Any] | None = None,
    key: str = "model",
) -> FitHyperModel:
    """The hyperparameters `instance.fit` declares, found before the first trial.

    Builds the model with the space's defaults and calls `instance.fit(hp, model, ...)`,
    stopped where it first calls the model (`model.fit`, `evaluate`, ...): what `fit`
    declares before it trains joins the search space, as keras-tuner's tuner learns
    `build`'s by building.

    Args:
        instance: the hypermodel (`overrides_fit(instance)`).
        space: `build`'s hyperparameters (`kdist.models.hypermodel.search_space`).
        build: builds the model of `hp` (`instance.build`, with kdist's messages).
        fit_args: the search's positional `fit` arguments. Defaults to `()`.
        fit_kwargs: the search's keyword `fit` arguments. Defaults to `None`.
        key: the model node's config path, for messages. Defaults to `"model"`.

    Returns:
        A `FitHyperModel`.

    Raises:
        ConfigError: naming `<key>._target_` when `fit` raises with the defaults, or
            returns without calling `model.fit`.
    """
    import keras

    from kdist.compat.tools_private import space_has

    hp = space.copy()
    model = build(hp)
    label = FitHyperModel(instance, (), space).label
    called: list[str] = []

    def stop(name: str) -> Callable[..., Any]:
        def stopped(*args: Any, **kwargs: Any) -> Any:
            called.append(name)
            raise _Probed

        return stopped

    try:
        with redirect_fit(model, stop("fit"), others=stop("another method")):
            instance.fit(hp, model, *fit_args, callbacks=[], **dict(fit_kwargs or {}))
    except _Probed:
        pass
    except Exception as error:
        raise ConfigError(
            f"{key}._target_",
            f"{label}(hp, model, ...) raised {type(error).__name__} with the default "
            f"hyperparameters, before it called model.fit: {_text(error)}",
        ) from error
    finally:
        del model
        keras.backend.clear_session(free_memory=False)
    if not called:
        raise ConfigError(
            f"{key}._target_",
            f"{label} returned without calling model.fit; kdist trains every trial "
            "through model.fit (the trial's Experiment.fit), not through a loop of fit's own",
            hint="call model.fit(*args, **kwargs) in fit, with the arguments to tune "
            "(e.g. batch_size=hp.Choice('batch_size', [16, 32]))",
        )
    new = [p for p in hp.space if not space_has(space, p.name, p.conditions)]
    merged = space.copy()
    merged.merge(new)
    return FitHyperModel(instance, tuple(dict.fromkeys(p.name for p in new)), merged)


def config_overrides(calls: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """The config overrides that `model.fit`'s arguments in a trial stand for.

    Args:
        calls: the keyword arguments of each `model.fit` call of the trial, in order.

    Returns:
        `(overrides, other)`: `key=value` overrides of the last call's config-key
        arguments (`batch_size=32` is `trainer.global_batch_size=32`), and the names of
        the arguments that are not config keys (data in hand, `sample_weight`, ...).
    """
    if not calls:
        return [], []
    last = calls[-1]
    overrides = []
    for name, value in last.items():
        if name in FIT_KEYS and value is not None:
            if name == "epochs" and last.get("initial_epoch"):
                continue  # epochs counted from another epoch: not trainer.epochs
            overrides.append(f"{FIT_KEYS[name]}={format_value(_plain(value))}")
    other = sorted({n for call in calls for n in call if n not in FIT_KEYS and n not in _NEUTRAL})
    return overrides, other


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {int(k) if hasattr(k, "__int__") else k: _plain(v) for k, v in value.items()}
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return value


def _best_epoch(history: Any, objective: Any) -> dict[str, float]:
    """The logs of the history's best epoch for `objective` (keras-tuner's choice)."""
    logs = getattr(history, "history", None) or {}
    name = str(objective.name)
    values = logs.get(name)
    if not values:
        return {k: float(v[-1]) for k, v in logs.items() if v}
    pick = min if str(objective.direction) == "min" else max
    finite = [i for i, v in enumerate(values) if math.isfinite(float(v))] or [len(values) - 1]
    best = pick(finite, key=lambda i: float(values[i]))
    return {k: float(v[best]) for k, v in logs.items() if len(v) > best}


def to_metrics(results: Any, objective: Any, *, label: str) -> dict[str, float]:
    """What a `HyperModel.fit` returned, as the trial's metrics (keras-tuner's rules).

    A `History`: its best epoch for the objective; a number: the objective's value; a
    dict: the metrics; a list of these: their mean, key by key.

    Raises:
        ConfigError: naming `model._target_` for `None` or another type.
    """
    import keras

    if isinstance(results, list) and results:
        each = [to_metrics(r, objective, label=label) for r in results]
        keys = set.intersection(*(set(m) for m in each))
        return {k: float(sum(m[k] for m in each) / len(each)) for k in sorted(keys)}
    if isinstance(results, keras.callbacks.History):
        return _best_epoch(results, objective)
    if isinstance(results, Mapping):
        try:
            return {str(k): float(v) for k, v in results.items()}
        except (TypeError, ValueError):
            pass
    elif not isinstance(results, bool):
        try:
            return {str(objective.name): float(results)}
        except (TypeError, ValueError):
            pass
    raise ConfigError(
        "model._target_",
        f"{label} returned {type(results).__name__}; it must return what model.fit "
        "returns (a History), a dict of metrics or the objective's value",
        hint="end fit with `return model.fit(*args, **kwargs)`",
    )
