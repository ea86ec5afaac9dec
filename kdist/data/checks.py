"""Cheap checks on in-memory data, run before the first step.

Each raises `ConfigError` naming the file's config key and what would be valid: data
that would otherwise train on garbage (NaN features, an extra class) or fail minutes in
with a TensorFlow traceback (labels outside the model's classes, strings, mismatched
lengths). The label-range check is its own function so that callers can apply it only
where labels are class ids (classification losses).

`check_batch_memory` bounds the batch before any work: one batch's tensors (the data's
element size times the global batch) must fit in half the memory the machine has
available, since the input pipeline prepares the next batch while a step uses one.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from kdist.config.errors import ConfigError

__all__ = [
    "available_memory",
    "check_batch_memory",
    "check_class_ids",
    "check_features",
    "check_finite",
    "check_label_range",
    "check_lengths",
    "check_rows",
    "element_bytes",
    "is_one_hot",
]


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


def check_rows(key: str, path: str, x: np.ndarray, *, name: str = "x") -> None:
    """Raise `ConfigError`, naming the file, unless its array `name` holds examples.

    An empty file would otherwise be blamed on the split (`validation_fraction` leaves no
    training example) or fail inside TensorFlow.
    """
    if x.ndim == 0:
        raise ConfigError(
            key,
            f"array {name!r} is a single value, not one row per example",
            value=path,
            hint="save an array with one row per example",
        )
    if len(x) == 0:
        raise ConfigError(
            key,
            f"is empty: its array {name!r} has 0 rows (examples)",
            value=path,
            hint="write the examples into it, or name another file",
        )


def is_one_hot(y: np.ndarray) -> bool:
    """Whether `y` is one-hot rows: 2-D, 2 or more columns, each row 0s and a single 1."""
    if y.ndim != 2 or y.shape[-1] < 2 or y.dtype.kind not in "biuf" or len(y) == 0:
        return False
    return bool(np.isin(y, (0, 1)).all() and (y.sum(axis=-1) == 1).all())


def check_class_ids(key: str, targets: np.ndarray, *, loss: str, from_logits: bool) -> None:
    """Raise `ConfigError`, naming the loss `key`, unless a sparse loss's targets are ids.

    Args:
        key: the loss's key (`trainer.loss`, or the model's own compile).
        targets: the training targets.
        loss: the loss's name, shown as the value.
        from_logits: whether the loss takes logits, for the categorical loss advised in
            its place for one-hot rows.
    """
    if is_one_hot(targets):
        if key != "trainer.loss":
            fix = "compile the model with loss='categorical_crossentropy'"
        elif from_logits:
            fix = (
                "use 'trainer.loss={_target_: keras.losses.CategoricalCrossentropy, "
                "from_logits: true}'"
            )
        else:
            fix = "use trainer.loss=categorical_crossentropy"
        raise ConfigError(
            key,
            f"takes integer class ids, but the targets are one-hot rows "
            f"({targets.shape[-1]} columns)",
            value=loss,
            hint=f"{fix} for one-hot targets, or give class ids (numpy.argmax(y, axis=-1))",
        )
    if not np.issubdtype(targets.dtype, np.integer):
        raise ConfigError(
            key,
            f"needs integer class ids, but the targets are {targets.dtype}",
            value=loss,
            hint="for float targets use a regression loss, e.g. trainer.loss=mse "
            "trainer.metrics=[mae]",
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
        + (
            " (or set data.source.num_classes)"
            if num_classes <= max(values) and key.startswith("data.")
            else ""
        ),
    )


def available_memory() -> int:
    """Bytes of memory available to a new allocation: `MemAvailable` of `/proc/meminfo`,
    else the machine's physical memory (`os.sysconf`)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))


def element_bytes(element_spec: Any) -> int:
    """Bytes of one example of a dataset with `element_spec` (unknown dimensions count 1,
    strings 1 byte)."""
    import tensorflow as tf

    total = 0
    for spec in tf.nest.flatten(element_spec):
        shape = getattr(spec, "shape", None)
        dtype = getattr(spec, "dtype", None)
        if shape is None or dtype is None:
            continue
        count = 1
        for dim in shape:
            count *= int(dim) if dim is not None else 1
        size = 1 if dtype == tf.string else int(tf.as_dtype(dtype).size)
        total += count * size
    return total


def check_batch_memory(
    source: Any, global_batch_size: int, *, key: str = "trainer.global_batch_size"
) -> None:
    """Refuse a global batch whose tensors would not fit in memory, before any work.

    Args:
        source: the run's `kdist.data.Source` (its training examples' `element_spec`).
        global_batch_size: examples per step over all replicas.
        key: the config key to name. Defaults to `"trainer.global_batch_size"`.

    Raises:
        ConfigError: naming `key` when one batch needs more than half the available
            memory.
    """
    per_example = element_bytes(source.dataset("train").element_spec)
    needed = per_example * int(global_batch_size)
    available = available_memory()
    if needed * 2 > available:
        raise ConfigError(
            key,
            f"makes one batch of {needed / 2**30:.1f} GiB ({per_example} bytes an example), "
            f"and two must fit in the {available / 2**30:.1f} GiB of memory available",
            value=int(global_batch_size),
            hint=f"at most {max(available // (2 * max(per_example, 1)), 1)} here",
        )
