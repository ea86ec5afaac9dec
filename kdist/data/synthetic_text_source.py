"""`synthetic_text`: learnable sequences of token ids, for the transformer without data."""

from __future__ import annotations

import numpy as np

from kdist.data.source import ArraySource

__all__ = ["TokenSource", "synthetic_text"]


class TokenSource(ArraySource):
    """An `ArraySource` of int32 token-id sequences that knows its vocabulary size."""

    vocab_size: int


def synthetic_text(
    *,
    num_train: int = 2048,
    num_validation: int = 512,
    sequence_length: int = 32,
    vocab_size: int = 1000,
    num_classes: int = 4,
    keywords_per_class: int = 8,
    signal_tokens: int = 4,
    min_length: int | None = None,
    seed: int = 0,
) -> TokenSource:
    """Token sequences whose class is told by a few class-specific keywords among noise.

    Ids `1 .. num_classes * keywords_per_class` are keywords (a block per class); the
    rest of the vocabulary is filler. Each sequence is filler with `signal_tokens`
    keywords of its class at random positions; with `min_length`, sequences have random
    lengths and are padded with id 0 at the end.

    Args:
        num_train: training sequences. Defaults to `2048`.
        num_validation: validation sequences. Defaults to `512`.
        sequence_length: tokens per sequence (padded length). Defaults to `32`.
        vocab_size: ids are in `[0, vocab_size)`; 0 is padding. Defaults to `1000`.
        num_classes: number of classes. Defaults to `4`.
        keywords_per_class: keywords reserved per class. Defaults to `8`.
        signal_tokens: keywords placed in each sequence. Defaults to `4`.
        min_length: shortest unpadded length. Defaults to `None`: no padding.
        seed: seed of the data. Defaults to `0`.

    Returns:
        A `TokenSource` with `vocab_size`.

    Raises:
        ValueError: when the sizes do not fit together.
    """
    reserved = num_classes * keywords_per_class
    if num_classes < 2:
        raise ValueError(f"`num_classes` ({num_classes}) must be at least 2.")
    if num_train < 1 or num_validation < 0:
        raise ValueError(
            f"`num_train` ({num_train}) must be >= 1 and `num_validation` ({num_validation}) >= 0."
        )
    if vocab_size < reserved + 2:
        raise ValueError(
            f"`vocab_size` ({vocab_size}) must exceed num_classes * keywords_per_class + 1 "
            f"({reserved + 1})."
        )
    shortest = sequence_length if min_length is None else int(min_length)
    if not 1 <= signal_tokens <= shortest <= sequence_length:
        raise ValueError(
            f"Need 1 <= `signal_tokens` ({signal_tokens}) <= `min_length` ({shortest}) <= "
            f"`sequence_length` ({sequence_length})."
        )
    rng = np.random.default_rng(seed)
    total = num_train + num_validation
    labels = rng.integers(0, num_classes, total).astype(np.int32)
    tokens = rng.integers(reserved + 1, vocab_size, (total, sequence_length)).astype(np.int32)
    lengths = rng.integers(shortest, sequence_length + 1, total)
    for i in range(total):
        positions = rng.choice(lengths[i], signal_tokens, replace=False)
        keywords = rng.integers(0, keywords_per_class, signal_tokens)
        tokens[i, positions] = 1 + labels[i] * keywords_per_class + keywords
        tokens[i, lengths[i] :] = 0
    source = TokenSource(
        x_train=tokens[:num_train],
        y_train=labels[:num_train],
        x_validation=tokens[num_train:],
        y_validation=labels[num_train:],
        num_classes=num_classes,
    )
    source.vocab_size = int(vocab_size)
    return source
