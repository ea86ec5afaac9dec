"""Keras callbacks kdist configures under `callbacks.*` (built inside the strategy scope)."""

from kdist.callbacks.factory import build

__all__ = ["build"]
