"""Built-in in-memory sources: scikit-learn's digits and learnable synthetic data."""

from __future__ import annotations

from collections.abc import Sequence

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
) -> ArraySource:
    """Learnable synthetic data: labels are the argmax of a fixed random linear map.

    Args:
        num_train: training examples. Defaults to `2048`.
        num_validation: validation examples. Defaults to `512`.
        input_shape: shape of one example. Defaults to `(28, 28, 1)`.
        num_classes: number of classes. Defaults to `10`.
        seed: seed of the features and of the labelling map. Defaults to `0`.

    Returns:
        An `ArraySource`.
    """
    if num_train < 1 or num_validation < 0:
        raise ValueError(
            f"`num_train` ({num_train}) must be >= 1 and `num_validation` ({num_validation}) >= 0."
        )
    if num_classes < 2:
        raise ValueError(f"`num_classes` ({num_classes}) must be at least 2.")
    shape = tuple(int(d) for d in input_shape)
    rng = np.random.default_rng(seed)
    total = num_train + num_validation
    x = rng.standard_normal((total, *shape)).astype(np.float32)
    weights = rng.standard_normal((int(np.prod(shape)), num_classes)).astype(np.float32)
    y = np.argmax(x.reshape(total, -1) @ weights, axis=1).astype(np.int32)
    return ArraySource(
        x_train=x[:num_train],
        y_train=y[:num_train],
        x_validation=x[num_train:],
        y_validation=y[num_train:],
        num_classes=num_classes,
    )
