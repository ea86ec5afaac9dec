"""The `keras` source: MNIST, Fashion-MNIST, CIFAR-10/100 from the local Keras cache.

kdist never downloads: it reads the files `keras.datasets.<name>.load_data()` leaves in
`$KERAS_HOME/datasets` (default `~/.keras/datasets`), in Keras's own layout, and names
the expected path when they are absent. Run `load_data()` once on a machine with
network access and copy the folder, or point `cache_dir` at a copy.
"""

from __future__ import annotations

import gzip
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kdist.config.errors import ConfigError
from kdist.data.files import model_array
from kdist.data.source import ArraySource

__all__ = ["DATASETS", "default_cache_dir", "expected_files", "keras_dataset"]

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

# Globals needed to rebuild the NumPy arrays inside the CIFAR pickles and nothing else,
# so a tampered file cannot run code (the list Keras's own loader allows).
_PICKLE_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
    }
)


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        if (module, name) in _PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dataset file")


def default_cache_dir() -> Path:
    """Where Keras caches datasets: `$KERAS_HOME/datasets`, else `~/.keras/datasets`."""
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return Path(home) / "datasets"


def _cifar_dir(cache: Path, folder: str) -> Path:
    # Keras 3 extracts into `<folder>-target/<folder>`; Keras 2 into `<folder>`.
    current = cache / f"{folder}-target" / folder
    legacy = cache / folder
    return legacy if legacy.is_dir() and not current.is_dir() else current


def expected_files(name: str, cache_dir: Path) -> list[Path]:
    """The files the dataset `name` is read from, in Keras's layout under `cache_dir`."""
    if name == "mnist":
        return [cache_dir / "mnist.npz"]
    if name == "fashion_mnist":
        folder = cache_dir / "fashion-mnist"
        return [
            folder / f"{prefix}-{kind}-idx{dims}-ubyte.gz"
            for prefix in ("train", "t10k")
            for kind, dims in (("labels", 1), ("images", 3))
        ]
    if name == "cifar10":
        folder = _cifar_dir(cache_dir, "cifar-10-batches-py")
        return [*(folder / f"data_batch_{i}" for i in range(1, 6)), folder / "test_batch"]
    if name == "cifar100":
        folder = _cifar_dir(cache_dir, "cifar-100-python")
        return [folder / "train", folder / "test"]
    raise ValueError(f"unknown dataset {name!r}")


def _mnist(files: list[Path], label_mode: str) -> Arrays:
    with np.load(files[0], allow_pickle=False) as archive:
        return archive["x_train"], archive["y_train"], archive["x_test"], archive["y_test"]


def _fashion_mnist(files: list[Path], label_mode: str) -> Arrays:
    def read(path: Path, offset: int) -> np.ndarray:
        with gzip.open(path, "rb") as handle:
            return np.frombuffer(handle.read(), np.uint8, offset=offset)

    y_train, y_test = read(files[0], 8), read(files[2], 8)
    x_train = read(files[1], 16).reshape(len(y_train), 28, 28)
    x_test = read(files[3], 16).reshape(len(y_test), 28, 28)
    return x_train, y_train, x_test, y_test


def _cifar_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as handle:
        raw = _ArrayUnpickler(handle, encoding="bytes").load()
    batch = {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
    images = np.asarray(batch["data"], np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return images, np.asarray(batch[label_key], np.int64)


def _cifar10(files: list[Path], label_mode: str) -> Arrays:
    parts = [_cifar_batch(path, "labels") for path in files[:5]]
    x_test, y_test = _cifar_batch(files[5], "labels")
    x_train = np.concatenate([p[0] for p in parts])
    y_train = np.concatenate([p[1] for p in parts])
    return x_train, y_train, x_test, y_test


def _cifar100(files: list[Path], label_mode: str) -> Arrays:
    key = f"{label_mode}_labels"
    x_train, y_train = _cifar_batch(files[0], key)
    x_test, y_test = _cifar_batch(files[1], key)
    return x_train, y_train, x_test, y_test


# name -> (reader, number of classes per label mode)
DATASETS: dict[str, tuple[Callable[[list[Path], str], Arrays], dict[str, int]]] = {
    "mnist": (_mnist, {"fine": 10}),
    "fashion_mnist": (_fashion_mnist, {"fine": 10}),
    "cifar10": (_cifar10, {"fine": 10}),
    "cifar100": (_cifar100, {"fine": 100, "coarse": 20}),
}


def keras_dataset(
    *,
    name: str = "mnist",
    cache_dir: str | None = None,
    label_mode: str = "fine",
    scale: float | None = None,
) -> ArraySource:
    """A `keras.datasets` dataset read from the local cache, never downloaded.

    The training split is the dataset's train set and the validation split its test
    set. Images are `(height, width, channels)`: MNIST and Fashion-MNIST get a channel
    axis; pixels become float32 in [0, 1].

    Args:
        name: `mnist`, `fashion_mnist`, `cifar10` or `cifar100`. Defaults to `"mnist"`.
        cache_dir: the folder Keras caches datasets in. Defaults to `None`:
            `$KERAS_HOME/datasets`, else `~/.keras/datasets`.
        label_mode: CIFAR-100's `fine` (100 classes) or `coarse` (20) labels.
            Defaults to `"fine"`.
        scale: multiply the pixels by this instead. Defaults to `None` (1/255).

    Returns:
        An `ArraySource`.

    Raises:
        ConfigError: naming `data.source.name` or `data.source.cache_dir` and the expected
            path when a file is absent or unreadable.
    """
    if name not in DATASETS:
        raise ConfigError(
            "data.source.name",
            "is not a keras dataset kdist reads",
            value=name,
            hint=f"use one of: {', '.join(DATASETS)}",
        )
    reader, classes = DATASETS[name]
    if label_mode not in classes:
        raise ConfigError(
            "data.source.label_mode",
            f"is not valid for {name}",
            value=label_mode,
            hint=f"use one of: {', '.join(classes)}",
        )
    cache = Path(os.path.expanduser(cache_dir)) if cache_dir else default_cache_dir()
    files = expected_files(name, cache)
    missing = [path for path in files if not path.is_file()]
    if missing:
        raise ConfigError(
            "data.source.cache_dir",
            f"has no {name} files: expected {missing[0]} (kdist does not download)",
            value=str(cache_dir) if cache_dir else None,
            hint=f"run keras.datasets.{name}.load_data() where there is network and copy "
            f"{cache} here, or set data.source.cache_dir to a folder holding the files",
        )
    try:
        x_train, y_train, x_test, y_test = reader(files, label_mode)
    except (OSError, KeyError, ValueError, EOFError, pickle.UnpicklingError) as error:
        raise ConfigError(
            "data.source.cache_dir",
            f"has unreadable {name} files ({type(error).__name__}: {error})",
            value=str(cache),
        ) from None
    if x_train.ndim == 3:
        x_train, x_test = x_train[..., None], x_test[..., None]
    return ArraySource(
        x_train=model_array(x_train, scale),
        y_train=np.asarray(y_train).reshape(-1),
        x_validation=model_array(x_test, scale),
        y_validation=np.asarray(y_test).reshape(-1),
        num_classes=classes[label_mode],
    )
