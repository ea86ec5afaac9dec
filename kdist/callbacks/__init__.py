"""Keras callbacks kdist configures under `callbacks.*` (built inside the strategy scope)."""

from kdist.callbacks.curves import Curves
from kdist.callbacks.factory import build
from kdist.callbacks.progress import ProgressBar

__all__ = ["Curves", "ProgressBar", "build"]
