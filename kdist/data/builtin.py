"""Built-in in-memory sources: scikit-learn's digits and learnable synthetic data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kdist.data.source import ArraySource

__all__ = ["digits", "synthetic"]


def digits(*, validation_fraction: float = 0.2, split_seed: int = 0) -> ArraySource:
    """scikit-learn's bundled 8x8 handwritten digits: 1797 images, 10 classes, no download.

    Pixels are scaled to [0, 1]; images have shape `(8, 8, 1)`.

    Args:
        validation_fraction: share of the examples held out for validation.
            Defaults to `0.2`.
        split_seed: seed of the fixed permutation that splits train from validation.
            Defaults to `0`.

    Returns:
        An `ArraySource`.
    """
    from sklearn.datasets import load_digits

    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"`validation_fraction` ({validation_fraction}) must be between 0 and 1.")
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    y = y.astype(np.int32)
    order = np.random.RandomState(split_seed).permutation(len(x))
    n_val = round(len(x) * validation_fraction)
    val, train = order[:n_val], order[n_val:]
    return ArraySource(
        x_train=x[train],
        y_train=y[train],
        x_validation=x[val],
        y_validation=y[val],
        num_classes=10,
    )


def synthetic(
    *,
    num_train: int = 2048,
    num_validation: int = 512,
    input_shape: Sequence[int] = (28, 28, 1),
    num_classes: int = 10,
    seed: int = 0,
    targets: str = "class",
) -> ArraySource:
    """Learnable synthetic data: labels are the argmax of a fixed random linear map.

    `targets` picks what each example carries: `class` (the label), `value` (a float
    regression target: the map's first output, shape `(1,)`), or `both` (a dict
    `{"class": label, "value": target}` for a model with two outputs of those names).

    Args:
        num_train: training examples. Defaults to `2048`.
        num_validation: validation examples. Defaults to `512`.
        input_shape: shape of one example. Defaults to `(28, 28, 1)`.
        num_classes: number of classes. Defaults to `10`.
        seed: seed of the features and of the labelling map. Defaults to `0`.
        targets: `class`, `value` or `both`. Defaults to `"class"`.

    Returns:
        An `ArraySource`.
    """
    if num_train < 1 or num_validation < 0:
        raise ValueError(
            f"`num_train` ({num_train}) must be >= 1 and `num_validation` ({num_validation}) >= 0."
        )
    if num_classes < 2:
        raise ValueError(f"`num_classes` ({num_classes}) must be at least 2.")
    if targets not in ("class", "value", "both"):
        raise ValueError(f"`targets` ({targets!r}) must be one of class, value, both.")
    shape = tuple(int(d) for d in input_shape)
    rng = np.random.default_rng(seed)
    total = num_train + num_validation
    x = rng.standard_normal((total, *shape)).astype(np.float32)
    weights = rng.standard_normal((int(np.prod(shape)), num_classes)).astype(np.float32)
    scores = x.reshape(total, -1) @ weights
    labels = np.argmax(scores, axis=1).astype(np.int32)
    # Unit variance: each score sums prod(shape) products of two standard normals.
    values = (scores[:, :1] / np.sqrt(np.prod(shape))).astype(np.float32)
    y: Any = {"class": labels, "value": values}
    if targets != "both":
        y = y[targets]
    return ArraySource(
        x_train=x[:num_train],
        y_train=_rows(y, slice(None, num_train)),
        x_validation=x[num_train:],
        y_validation=_rows(y, slice(num_train, None)),
        num_classes=num_classes,
    )


def _rows(y: Any, rows: slice) -> Any:
    return {k: v[rows] for k, v in y.items()} if isinstance(y, dict) else y[rows]
