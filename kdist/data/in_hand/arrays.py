"""NumPy arrays given to `fit`: checked, split for validation, and an `ArraySource`.

The same arrays give the same training as `data=npz` (`ArraySource` is behind both),
order and shuffle included. `validation_split` keeps the last fraction for validation
before any shuffle, as Keras does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.in_hand.source import Given
from kdist.data.source import ArraySource

__all__ = ["as_arrays", "as_tuple", "from_arrays", "length", "take"]


def as_arrays(value: Any, name: str) -> Any:
    """A NumPy array (or a dict/tuple of them), floats as float32 (Keras's floatx)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return {str(k): as_arrays(v, f"{name}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)) and value and not np.isscalar(value[0]):
        shapes = {np.shape(v) for v in value}
        if len(shapes) > 1 or isinstance(value, tuple):
            return tuple(as_arrays(v, f"{name}[{i}]") for i, v in enumerate(value))
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise ConfigError(name, f"cannot be read as a NumPy array ({error})") from None
    if array.dtype == object:
        raise ConfigError(
            name,
            "holds Python objects, not numbers or strings",
            hint="pass a NumPy array of one dtype (or a dict of them)",
        )
    if array.ndim == 0:
        raise ConfigError(name, "is a scalar: it needs examples on its first axis")
    if np.issubdtype(array.dtype, np.floating) and array.dtype != np.float32:
        array = array.astype(np.float32)
    return array


def length(structure: Any) -> int:
    return len(tf.nest.flatten(structure)[0])


def take(structure: Any, part: slice) -> Any:
    return None if structure is None else tf.nest.map_structure(lambda a: a[part], structure)


def as_tuple(batch: Any) -> tuple[Any, ...]:
    return tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)


def from_arrays(
    x: Any,
    y: Any,
    *,
    sample_weight: Any,
    validation: Any,
    validation_split: float,
    shuffle: bool,
) -> Given:
    x, y = as_arrays(x, "x"), as_arrays(y, "y")
    weights = as_arrays(sample_weight, "sample_weight")
    if weights is not None and y is None:
        raise ConfigError("sample_weight", "needs targets: give y too")
    if not 0.0 <= float(validation_split) < 1.0:
        raise ConfigError(
            "validation_split", "must be in [0, 1)", value=validation_split, hint="e.g. 0.2"
        )
    count = length(x)
    for name, part in (("y", y), ("sample_weight", weights)):
        if part is not None and length(part) != count:
            raise ConfigError(
                name,
                f"has {length(part)} examples, x has {count}",
                hint="give one row per example",
            )
    if validation is not None and isinstance(validation, tf.data.Dataset):
        raise ConfigError(
            "validation_data",
            "is a tf.data.Dataset while x is NumPy arrays",
            hint="pass (x_val, y_val) arrays with arrays",
        )
    if validation is None and validation_split:
        # Keras's rule: the last fraction, before shuffling.
        at = int(np.floor(count * (1.0 - float(validation_split))))
        if at < 1 or at == count:
            raise ConfigError(
                "validation_split",
                f"leaves no {'training' if at < 1 else 'validation'} example of {count}",
                value=validation_split,
            )
        validation = (take(x, slice(at, None)), take(y, slice(at, None)))
        if weights is not None:
            validation += (take(weights, slice(at, None)),)
        x, y, weights = (take(p, slice(None, at)) for p in (x, y, weights))
    if validation is None:
        validation = (take(x, slice(0, 0)), take(y, slice(0, 0)))
    x_val, y_val = validation[0], validation[1]
    if (y_val is None) != (y is None):
        raise ConfigError(
            "validation_data",
            "has targets while y is None" if y is None else "has no targets while y has",
        )
    w_val = validation[2] if len(validation) > 2 else None
    if w_val is not None and weights is None:
        weights = np.ones(length(x), np.float32)
    if weights is not None and w_val is None:
        w_val = np.ones(length(x_val), np.float32)
    try:
        source = ArraySource(
            x_train=x,
            y_train=y,
            x_validation=x_val,
            y_validation=y_val,
            w_train=weights,
            w_validation=w_val,
        )
    except ValueError as error:
        raise ConfigError("validation_data", str(error)) from None
    return Given(source, "arrays", None, shuffle, one_pipeline=False)
