"""The argument checks the built-in models share, each with one message."""

from __future__ import annotations

__all__ = ["check_dropout", "check_num_classes", "check_positive"]


def check_num_classes(num_classes: int) -> None:
    """Raise `ValueError` unless a classifier has at least two classes."""
    if num_classes < 2:
        raise ValueError(f"`num_classes` ({num_classes}) must be at least 2.")


def check_dropout(dropout: float) -> None:
    """Raise `ValueError` unless `dropout` is a rate in [0, 1)."""
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"`dropout` ({dropout}) must be in [0, 1).")


def check_positive(name: str, value: int) -> int:
    """`value` as an `int`; `ValueError`, naming the argument `name`, unless it is at least 1."""
    if value < 1:
        raise ValueError(f"`{name}` ({value}) must be a positive integer.")
    return int(value)
