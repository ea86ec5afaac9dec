"""What file-backed sources share: the `FileSource` interface, path checks, dtype rules."""

from __future__ import annotations

import abc
import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.source import Source

__all__ = [
    "FileSource",
    "existing_path",
    "expand_files",
    "model_array",
    "model_tensor",
    "split_indices",
]


class FileSource(Source):
    """A source whose examples are read from files, so the pipeline can shard by file.

    Subclasses list each split's files and read any subset of them; with
    `data.shard_policy=file` each input pipeline reads only its own training files.
    """

    @abc.abstractmethod
    def split_files(self, split: str) -> Sequence[str]:
        """The files of `split` (`"train"` or `"validation"`), in a fixed order."""

    @abc.abstractmethod
    def read(self, split: str, files: Sequence[str]) -> tf.data.Dataset:
        """The unbatched `(features, label)` examples of `files` (a subset of `split`'s)."""

    def count(self, split: str, files: Sequence[str]) -> int | None:
        """Examples in `files` of `split`, or `None` when unknown without reading them."""
        return None

    @property
    def files(self) -> Sequence[str]:
        return self.split_files("train")

    def dataset(self, split: str) -> tf.data.Dataset:
        return self.read(split, self.split_files(split))


def existing_path(key: str, path: str, *, kind: str = "file") -> str:
    """`path` with `~` expanded, checked to exist.

    Args:
        key: the config key that holds the path, for the message.
        path: the path.
        kind: `"file"`, `"dir"` or `"any"`. Defaults to `"file"`.

    Returns:
        The expanded path.

    Raises:
        ConfigError: naming `key` and the path when it does not exist.
    """
    expanded = os.path.expanduser(str(path))
    is_dir = tf.io.gfile.isdir(expanded)
    exists = tf.io.gfile.exists(expanded)
    ok = {"file": exists and not is_dir, "dir": is_dir, "any": exists}[kind]
    if not ok:
        what = {"file": "file", "dir": "folder", "any": "path"}[kind]
        raise ConfigError(key, f"no such {what}", value=str(path), hint=f"expected {expanded}")
    return expanded


def expand_files(key: str, patterns: str | Sequence[str]) -> list[str]:
    """The sorted files matching a glob pattern or a list of patterns.

    Raises:
        ConfigError: naming `key` when a pattern matches nothing.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    found: list[str] = []
    for pattern in patterns:
        expanded = os.path.expanduser(str(pattern))
        matches = sorted(m for m in tf.io.gfile.glob(expanded) if not tf.io.gfile.isdir(m))
        if not matches:
            raise ConfigError(key, "matches no file", value=str(pattern))
        found.extend(matches)
    return found


def split_indices(count: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A fixed random split of `range(count)`: `(train, validation)` index arrays.

    Raises:
        ValueError: when `fraction` is not in [0, 1) or leaves no training example.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"`validation_fraction` ({fraction}) must be in [0, 1).")
    order = np.random.RandomState(seed).permutation(count)
    n_val = round(count * fraction)
    if count - n_val < 1:
        raise ValueError(f"`validation_fraction` ({fraction}) leaves no training example.")
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def model_array(x: np.ndarray, scale: float | None) -> np.ndarray:
    """Features as a model reads them (NumPy): see `model_tensor`."""
    if x.dtype.kind in "US":
        return x  # text: a tf.string feature
    if scale is not None:
        return x.astype(np.float32) * np.float32(scale)
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255.0)
    if np.issubdtype(x.dtype, np.integer):
        return x.astype(np.int32)
    return x.astype(np.float32)


def model_tensor(x: tf.Tensor, scale: float | None) -> tf.Tensor:
    """Features as a model reads them.

    `uint8` (pixels) become float32 in [0, 1]; other integers stay integers (token ids)
    as int32; floats become float32. A `scale` turns anything into float32 times `scale`.
    """
    if scale is not None:
        return tf.cast(x, tf.float32) * float(scale)
    if x.dtype == tf.uint8:
        return tf.cast(x, tf.float32) / 255.0
    if x.dtype.is_integer:
        return tf.cast(x, tf.int32)
    return tf.cast(x, tf.float32)
