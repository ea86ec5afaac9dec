"""The `npz` source: NumPy arrays in `.npz` files, loaded without pickle."""

from __future__ import annotations

import zipfile
from typing import Any

import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.checks import (
    check_features,
    check_finite,
    check_label_range,
    check_lengths,
    check_rows,
)
from kdist.data.files import existing_path, model_array, split_indices
from kdist.data.source import ArraySource

__all__ = ["load_arrays", "npz"]


def load_arrays(key: str, path: str, names: tuple[str, ...]) -> list[np.ndarray]:
    """The arrays `names` of the `.npz` file `path` (object arrays are refused).

    Raises:
        ConfigError: naming `key` when the file is missing, unreadable or lacks a name.
    """
    found = existing_path(key, path)
    try:
        with np.load(found, allow_pickle=False) as archive:
            if not archive.files:
                raise ConfigError(
                    key,
                    "is empty: it holds no arrays",
                    value=path,
                    hint=f"save {', '.join(map(repr, names))} in it (numpy.savez)",
                )
            missing = [name for name in names if name not in archive.files]
            if missing:
                raise ConfigError(
                    key,
                    f"has no array {missing[0]!r}",
                    value=path,
                    hint=f"arrays in it: {', '.join(archive.files) or 'none'}",
                )
            return [archive[name] for name in names]
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        if isinstance(error, ConfigError):
            raise
        # ValueError: an object array, which would need pickle to load.
        raise ConfigError(key, f"cannot be read as .npz ({error})", value=path) from None


def _check_arrays(
    key: str, arrays: list[np.ndarray], names: tuple[str, ...], *, features: int
) -> None:
    """Lengths, dtypes and finiteness of one file's arrays, before any split or copy.

    The first `features` arrays are features; the rest are targets (labels) and weights.
    """
    kinds = ["features" if i < features else "labels" for i in range(len(arrays))]
    for i in range(1, len(arrays)):
        check_lengths(key, arrays[0], arrays[i], what=f" ({names[0]!r} and {names[i]!r})")
    for array, name, kind in zip(arrays, names, kinds, strict=True):
        if kind == "features" and array.dtype.kind in "US":
            continue  # text, for the model's own StringLookup or TextVectorization
        check_features(key, array, name=f"{kind} {name!r}")
        check_finite(key, array, name=f"{kind} {name!r}")


def npz(
    *,
    path: str,
    x_key: str | list[str] = "x",
    y_key: str | list[str] = "y",
    validation_path: str | None = None,
    validation_x_key: str | list[str] | None = None,
    validation_y_key: str | list[str] | None = None,
    validation_fraction: float = 0.2,
    split_seed: int = 0,
    num_classes: int | None = None,
    scale: float | None = None,
    weight_key: str | None = None,
) -> ArraySource:
    """Features, targets and optional sample weights from `.npz` files (`numpy.savez`).

    Targets may be class ids, one-hot rows or float regression targets. `x_key` and
    `y_key` may each be a list of array names: the features become a dict of inputs
    and the targets a dict of outputs, keyed by array name (name the model's inputs
    and outputs the same). Classification checks (integer labels, their range) are
    made by the experiment when the loss is a classification loss.

    The validation split is, in this order: `validation_x_key`/`validation_y_key` (in
    `validation_path` or else `path`), the `x_key`/`y_key` arrays of `validation_path`,
    or a fixed random `validation_fraction` of `path`'s examples. Keras's `mnist.npz`,
    for instance, reads as `x_key=x_train y_key=y_train validation_x_key=x_test
    validation_y_key=y_test`.

    Args:
        path: the training `.npz` file.
        x_key: name of the features array, or a list of names (a dict of inputs).
            Defaults to `"x"`.
        y_key: name of the targets array, or a list of names (a dict of targets).
            Defaults to `"y"`.
        validation_path: a separate validation file. Defaults to `None`.
        validation_x_key: name of the validation features array. Defaults to `None`.
        validation_y_key: name of the validation labels array. Defaults to `None`.
        validation_fraction: share held out when there is no validation array.
            Defaults to `0.2`.
        split_seed: seed of that split. Defaults to `0`.
        num_classes: number of classes. Defaults to `None`: one more than the largest label.
        scale: multiply the features by this (as float32). Defaults to `None`: `uint8`
            becomes [0, 1] floats, other integers stay int32 (token ids), floats float32.
        weight_key: name of an array of per-example sample weights (in each file).
            Defaults to `None`: no sample weights.

    Returns:
        An `ArraySource` (in memory; sharded by example, not by file).

    Raises:
        ConfigError: naming the key of a missing file or array, arrays of different
            lengths, strings, NaN or infinite values, or labels outside
            `[0, num_classes)`.
    """
    xs, ys = _names(x_key), _names(y_key)
    ws = (weight_key,) if weight_key else ()

    def read(key: str, where: str, x_names: tuple[str, ...], y_names: tuple[str, ...]) -> Any:
        arrays = load_arrays(key, where, (*x_names, *y_names, *ws))
        check_rows(key, where, arrays[0], name=x_names[0])
        _check_arrays(key, arrays, (*x_names, *y_names, *ws), features=len(x_names))
        x = _structure(x_key, x_names, arrays[: len(x_names)])
        y = _structure(y_key, y_names, arrays[len(x_names) : len(x_names) + len(y_names)])
        w = arrays[-1] if ws else None
        return x, y, w

    x, y, w = read("data.source.path", path, xs, ys)
    if validation_x_key or validation_y_key:
        if not (validation_x_key and validation_y_key):
            raise ConfigError(
                "data.source.validation_y_key"
                if validation_x_key
                else "data.source.validation_x_key",
                "is needed with the other validation key",
            )
        where = validation_path or path
        key = "data.source.validation_path" if validation_path else "data.source.path"
        x_val, y_val, w_val = read(key, where, _names(validation_x_key), _names(validation_y_key))
    elif validation_path:
        x_val, y_val, w_val = read("data.source.validation_path", validation_path, xs, ys)
    else:
        count = len(_first(x))
        try:
            train, val = split_indices(count, validation_fraction, split_seed)
        except ValueError as error:
            raise ConfigError(
                "data.source.validation_fraction", str(error), value=validation_fraction
            ) from None
        x, x_val = _take(x, train), _take(x, val)
        y, y_val = _take(y, train), _take(y, val)
        if w is not None:
            w, w_val = w[train], w[val]
        else:
            w_val = None
    validation_key = "validation_path" if validation_path else "path"
    if num_classes and not isinstance(y, dict) and np.issubdtype(y.dtype, np.integer):
        # Class ids declared with their count: a label the model has no output for
        # fails late, in TensorFlow. (Without num_classes, the experiment checks class
        # ids when the loss is a classification loss.)
        check_label_range("data.source.path", y, num_classes)
        check_label_range(f"data.source.{validation_key}", y_val, num_classes)
    return ArraySource(
        x_train=tf.nest.map_structure(lambda a: model_array(a, scale), x),
        y_train=tf.nest.map_structure(_flat_labels, y),
        x_validation=tf.nest.map_structure(lambda a: model_array(a, scale), x_val),
        y_validation=tf.nest.map_structure(_flat_labels, y_val),
        num_classes=num_classes,
        w_train=w,
        w_validation=w_val,
    )


def _names(key: Any) -> tuple[str, ...]:
    if isinstance(key, (list, tuple)):
        return tuple(str(k) for k in key)
    return (str(key),)


def _structure(key: Any, names: tuple[str, ...], arrays: list[np.ndarray]) -> Any:
    if isinstance(key, (list, tuple)):
        return dict(zip(names, arrays, strict=True))
    return arrays[0]


def _first(structure: Any) -> np.ndarray:
    return tf.nest.flatten(structure)[0]


def _take(structure: Any, index: np.ndarray) -> Any:
    return tf.nest.map_structure(lambda a: a[index], structure)


def _flat_labels(y: np.ndarray) -> np.ndarray:
    """Integer labels as a vector (an `(n, 1)` column included); other targets as they are."""
    if np.issubdtype(y.dtype, np.integer) and y.size == len(y):
        return y.reshape(-1)
    return y
