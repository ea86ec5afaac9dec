"""The `npz` source: NumPy arrays in `.npz` files, loaded without pickle."""

from __future__ import annotations

import zipfile

import numpy as np

from kdist.config.errors import ConfigError
from kdist.data.checks import check_features, check_finite, check_label_range, check_lengths
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


def _check_pair(key: str, x: np.ndarray, y: np.ndarray, names: tuple[str, str]) -> None:
    """Lengths, dtypes and finiteness of one file's arrays, before any split or copy."""
    check_lengths(key, x, y, what=f" ({names[0]!r} and {names[1]!r})")
    check_features(key, x, name=f"features {names[0]!r}")
    check_features(key, y, name=f"labels {names[1]!r}")
    check_finite(key, x, name=f"features {names[0]!r}")
    check_finite(key, y, name=f"labels {names[1]!r}")


def npz(
    *,
    path: str,
    x_key: str = "x",
    y_key: str = "y",
    validation_path: str | None = None,
    validation_x_key: str | None = None,
    validation_y_key: str | None = None,
    validation_fraction: float = 0.2,
    split_seed: int = 0,
    num_classes: int | None = None,
    scale: float | None = None,
) -> ArraySource:
    """Features and integer labels from `.npz` files (`numpy.savez`).

    The validation split is, in this order: `validation_x_key`/`validation_y_key` (in
    `validation_path` or else `path`), the `x_key`/`y_key` arrays of `validation_path`,
    or a fixed random `validation_fraction` of `path`'s examples. Keras's `mnist.npz`,
    for instance, reads as `x_key=x_train y_key=y_train validation_x_key=x_test
    validation_y_key=y_test`.

    Args:
        path: the training `.npz` file.
        x_key: name of the features array. Defaults to `"x"`.
        y_key: name of the labels array. Defaults to `"y"`.
        validation_path: a separate validation file. Defaults to `None`.
        validation_x_key: name of the validation features array. Defaults to `None`.
        validation_y_key: name of the validation labels array. Defaults to `None`.
        validation_fraction: share held out when there is no validation array.
            Defaults to `0.2`.
        split_seed: seed of that split. Defaults to `0`.
        num_classes: number of classes. Defaults to `None`: one more than the largest label.
        scale: multiply the features by this (as float32). Defaults to `None`: `uint8`
            becomes [0, 1] floats, other integers stay int32 (token ids), floats float32.

    Returns:
        An `ArraySource` (in memory; sharded by example, not by file).

    Raises:
        ConfigError: naming the key of a missing file or array, arrays of different
            lengths, strings, NaN or infinite values, or labels outside
            `[0, num_classes)`.
    """
    x, y = load_arrays("data.source.path", path, (x_key, y_key))
    _check_pair("data.source.path", x, y, (x_key, y_key))
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
        x_val, y_val = load_arrays(key, where, (validation_x_key, validation_y_key))
        _check_pair(key, x_val, y_val, (validation_x_key, validation_y_key))
    elif validation_path:
        x_val, y_val = load_arrays("data.source.validation_path", validation_path, (x_key, y_key))
        _check_pair("data.source.validation_path", x_val, y_val, (x_key, y_key))
    else:
        try:
            train, val = split_indices(len(x), validation_fraction, split_seed)
        except ValueError as error:
            raise ConfigError(
                "data.source.validation_fraction", str(error), value=validation_fraction
            ) from None
        x, y, x_val, y_val = x[train], y[train], x[val], y[val]
    validation_key = "validation_path" if validation_path else "path"
    for name, features, labels in (("path", x, y), (validation_key, x_val, y_val)):
        if len(features) != len(labels):
            raise ConfigError(
                f"data.source.{name}",
                f"has {len(features)} feature rows but {len(labels)} labels",
            )
        if labels.size and not np.issubdtype(labels.dtype, np.integer):
            raise ConfigError(
                f"data.source.{name}",
                f"labels must be integers, not {labels.dtype}",
                hint="store class ids 0..num_classes-1",
            )
    if np.issubdtype(y.dtype, np.integer) and y.size:
        # Class ids: a label the model has no output for fails late, in TensorFlow.
        classes = num_classes or int(max(y.max(), y_val.max() if y_val.size else 0)) + 1
        check_label_range("data.source.path", y, classes)
        check_label_range(f"data.source.{validation_key}", y_val, classes)
    return ArraySource(
        x_train=model_array(x, scale),
        y_train=y.reshape(-1),
        x_validation=model_array(x_val, scale),
        y_validation=y_val.reshape(-1),
        num_classes=num_classes,
    )
