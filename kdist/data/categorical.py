"""Synthetic categorical data: rows of ids, the input of embedding-heavy models.

Recommendation and click-through models look up one embedding row per categorical
feature (user, item, category, ...); their tables are large and sparsely updated,
which is what parameter-server training with sharded variables is for.
"""

from __future__ import annotations

import numpy as np

from kdist.data.source import ArraySource

__all__ = ["synthetic_categorical"]


def synthetic_categorical(
    *,
    num_train: int = 20_000,
    num_validation: int = 4_000,
    num_fields: int = 8,
    vocab_size: int = 1_000,
    num_classes: int = 2,
    skew: float = 1.0,
    seed: int = 0,
) -> ArraySource:
    """Learnable rows of categorical ids with a label from a hidden per-id score.

    Each example has `num_fields` integer ids, field `f`'s drawn from `[0, vocab_size)`
    with a power-law frequency (id rank `r` has weight `1 / (r + 1) ** skew`, as item
    popularity usually is). Every (field, id) pair has a fixed random score per class;
    the label is the class with the highest summed score. A linear model of one-hot
    features can fit it exactly, and an embedding model learns it from the frequent ids.

    Args:
        num_train: training examples. Defaults to `20_000`.
        num_validation: validation examples. Defaults to `4_000`.
        num_fields: categorical features per example. Defaults to `8`.
        vocab_size: distinct ids per field. Defaults to `1_000`.
        num_classes: number of classes. Defaults to `2`.
        skew: power-law exponent of the id frequencies; `0` is uniform. Defaults to `1.0`.
        seed: seed of the ids and of the hidden scores. Defaults to `0`.

    Returns:
        An `ArraySource` with int32 features of shape `(num_fields,)`.

    Raises:
        ValueError: for a non-positive size, fewer than 2 classes or a negative skew.
    """
    if num_train < 1 or num_validation < 0:
        raise ValueError(
            f"`num_train` ({num_train}) must be >= 1 and `num_validation` ({num_validation}) >= 0."
        )
    if num_fields < 1 or vocab_size < 1:
        raise ValueError(
            f"`num_fields` ({num_fields}) and `vocab_size` ({vocab_size}) must be positive."
        )
    if num_classes < 2:
        raise ValueError(f"`num_classes` ({num_classes}) must be at least 2.")
    if skew < 0:
        raise ValueError(f"`skew` ({skew}) must be >= 0.")
    rng = np.random.default_rng(seed)
    total = num_train + num_validation
    weights = 1.0 / (np.arange(vocab_size) + 1.0) ** skew
    weights /= weights.sum()
    ids = np.empty((total, num_fields), dtype=np.int32)
    for field in range(num_fields):
        # Each field ranks its ids differently, so popular ids differ between fields.
        ranked = rng.permutation(vocab_size)
        ids[:, field] = ranked[rng.choice(vocab_size, size=total, p=weights)]
    scores = rng.standard_normal((num_fields, vocab_size, num_classes)).astype(np.float32)
    summed = scores[np.arange(num_fields)[None, :], ids].sum(axis=1)
    labels = np.argmax(summed, axis=1).astype(np.int32)
    return ArraySource(
        x_train=ids[:num_train],
        y_train=labels[:num_train],
        x_validation=ids[num_train:],
        y_validation=labels[num_train:],
        num_classes=num_classes,
    )
