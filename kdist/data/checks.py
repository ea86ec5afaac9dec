"""Cheap checks on in-memory data, run before the first step.

Each raises `ConfigError` naming the file's config key and what would be valid: data
that would otherwise train on garbage (NaN features, an extra class) or fail minutes in
with a TensorFlow traceback (labels outside the model's classes, strings, mismatched
lengths). The label-range check is its own function so that callers can apply it only
where labels are class ids (classification losses).
"""

from __future__ import annotations

import numpy as np

from kdist.config.errors import ConfigError

__all__ = ["check_features", "check_finite", "check_label_range", "check_lengths"]


def _where(index: tuple[int, ...]) -> str:
    return f"example {index[0]}" if len(index) == 1 else f"example {index[0]}, {index[1:]}"


def check_lengths(key: str, x: np.ndarray, y: np.ndarray, *, what: str = "") -> None:
    """Raise `ConfigError` unless `x` and `y` hold the same number of examples."""
    if len(x) != len(y):
        raise ConfigError(
            key,
            f"has {len(x)} feature rows but {len(y)} labels{what}",
            hint="both arrays need one entry per example",
        )


def check_features(key: str, x: np.ndarray, *, name: str = "features") -> None:
    """Raise `ConfigError` unless `x` holds numbers (not strings, bytes or objects)."""
    if x.dtype.kind not in "biuf":
        raise ConfigError(
            key,
            f"{name} are {x.dtype} ({x.dtype.kind!r} kind), not numbers",
            hint="store int or float arrays (encode text as token ids first)",
        )


def check_finite(key: str, x: np.ndarray, *, name: str = "features") -> None:
    """Raise `ConfigError` when a floating array holds NaN or infinity (first one named)."""
    if x.dtype.kind != "f" or x.size == 0:
        return
    finite = np.isfinite(x)
    if finite.all():
        return
    first = tuple(int(i) for i in np.argwhere(~finite)[0])
    count = int(x.size - np.count_nonzero(finite))
    raise ConfigError(
        key,
        f"{name} hold {count} NaN or infinite value(s), the first at {_where(first)} ({x[first]})",
        hint="clean or drop those examples; training on them gives a NaN loss",
    )


def check_label_range(key: str, y: np.ndarray, num_classes: int) -> None:
    """Raise `ConfigError` unless every label is a class id in `[0, num_classes)`.

    Args:
        key: the config key of the file or folder the labels come from.
        y: integer class ids (any shape).
        num_classes: the model's number of outputs.

    Raises:
        ConfigError: naming `key`, the first bad labels and the valid range.
    """
    if y.size == 0:
        return
    labels = np.asarray(y).reshape(-1)
    bad = (labels < 0) | (labels >= num_classes)
    if not bad.any():
        return
    values = sorted({int(v) for v in labels[bad]})
    shown = ", ".join(str(v) for v in values[:5]) + (", ..." if len(values) > 5 else "")
    raise ConfigError(
        key,
        f"has {int(bad.sum())} label(s) outside [0, {num_classes}): {shown}",
        hint=f"class ids must be 0..{num_classes - 1}"
        + ("" if num_classes > max(values) else " (or set data.source.num_classes)"),
    )
