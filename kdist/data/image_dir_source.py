"""The `image_dir` source: one folder of images per class (PNG, JPEG, BMP, GIF)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.files import FileSource, existing_path, split_indices

__all__ = ["IMAGE_EXTENSIONS", "ImageDirSource", "image_dir"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")


def _listing(key: str, root: str, extensions: Sequence[str]) -> dict[str, list[str]]:
    folder = existing_path(key, root, kind="dir")
    classes = sorted(
        name
        for name in tf.io.gfile.listdir(folder)
        if tf.io.gfile.isdir(os.path.join(folder, name))
    )
    classes = [name.rstrip("/") for name in classes]
    if not classes:
        raise ConfigError(
            key, "has no class sub-folders", value=root, hint="use root/<class>/*.png"
        )
    wanted = tuple(e.lower() for e in extensions)
    listing = {}
    for name in classes:
        files = sorted(
            os.path.join(folder, name, f)
            for f in tf.io.gfile.listdir(os.path.join(folder, name))
            if f.lower().endswith(wanted)
        )
        listing[name] = files
    if not any(listing.values()):
        raise ConfigError(
            key, f"has no images ({', '.join(wanted)}) in its class folders", value=root
        )
    empty = [name for name, files in listing.items() if not files]
    if empty:
        # It would still be a class: an output the model is trained never to predict.
        raise ConfigError(
            key,
            f"has class folder(s) without images: {', '.join(empty)}",
            value=root,
            hint=f"add images ({', '.join(wanted)}) to them or remove them",
        )
    return listing


def _decode(path: tf.Tensor, channels: int) -> tf.Tensor:
    return tf.io.decode_image(tf.io.read_file(path), channels=channels, expand_animations=False)


def verify(key: str, files: Sequence[str], channels: int) -> None:
    """Decode every image once; raise `ConfigError` naming the first that does not decode.

    The images are decoded in parallel; only when that fails are they read again one by
    one to name the file (TensorFlow's error does not).
    """
    if not files:
        return
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(list(files), tf.string))
    dataset = dataset.map(
        lambda f: tf.shape(_decode(f, channels))[0], num_parallel_calls=tf.data.AUTOTUNE
    )
    try:
        for _ in dataset.batch(256):
            pass
        return
    except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError, tf.errors.DataLossError):
        pass
    for file in files:
        try:
            _decode(tf.constant(file), channels)
        except (
            tf.errors.InvalidArgumentError,
            tf.errors.NotFoundError,
            tf.errors.DataLossError,
        ) as error:
            first = (error.message or type(error).__name__).strip().splitlines()[0]
            raise ConfigError(
                key,
                f"holds an image that does not decode: {file} ({first[:120]})",
                hint="replace or remove the file (PNG, JPEG, BMP or GIF)",
            ) from None


class ImageDirSource(FileSource):
    """Images in class folders, decoded and resized as they are read.

    All arguments are keyword-only.

    Args:
        files: split -> image paths.
        labels: split -> class ids, aligned with `files`.
        class_names: the class folder names; the class id is the index.
        image_size: `(height, width)` every image is resized to.
        channels: 1 (grayscale), 3 (RGB) or 4 (RGBA).
    """

    def __init__(
        self,
        *,
        files: dict[str, list[str]],
        labels: dict[str, list[int]],
        class_names: list[str],
        image_size: tuple[int, int],
        channels: int,
    ):
        self._files = files
        self._labels = {
            split: dict(zip(files[split], labels[split], strict=True)) for split in files
        }
        self.class_names = class_names
        self.num_classes = len(class_names)
        self.image_size = image_size
        self.channels = channels
        self.input_shape = (*image_size, channels)

    def split_files(self, split: str) -> Sequence[str]:
        return self._files[split]

    def size(self, split: str) -> int:
        return len(self._files[split])

    def count(self, split: str, files: Sequence[str]) -> int | None:
        return len(files)

    def read(self, split: str, files: Sequence[str]) -> tf.data.Dataset:
        labels = [self._labels[split][f] for f in files]
        size, channels = self.image_size, self.channels

        def load(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            image = _decode(path, channels)
            image = tf.image.convert_image_dtype(image, tf.float32)
            image = tf.image.resize(image, size)
            image.set_shape((*size, channels))
            return image, label

        pairs = tf.data.Dataset.from_tensor_slices(
            (tf.constant(list(files), tf.string), tf.constant(labels, tf.int32))
        )
        return pairs.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def image_dir(
    *,
    path: str,
    validation_path: str | None = None,
    validation_fraction: float = 0.2,
    split_seed: int = 0,
    image_size: Sequence[int] | None = None,
    channels: int = 3,
    extensions: Sequence[str] = IMAGE_EXTENSIONS,
    verify_images: bool = True,
) -> ImageDirSource:
    """Images in one sub-folder per class: `path/<class>/<image>`; classes sorted by name.

    Pixels become float32 in [0, 1], resized (bilinear) to `image_size`.

    Args:
        path: the training folder.
        validation_path: a validation folder with the same class sub-folders.
            Defaults to `None`: a fixed random `validation_fraction` of `path`'s images.
        validation_fraction: share held out when there is no validation folder.
            Defaults to `0.2`.
        split_seed: seed of that split. Defaults to `0`.
        image_size: `[height, width]`. Defaults to `None`: the first image's size.
        channels: 1, 3 or 4. Defaults to `3`.
        extensions: file endings read. Defaults to PNG, JPEG, BMP and GIF.
        verify_images: decode every image once before training, so that a corrupt
            file stops the run at once, named, instead of an epoch later, unnamed
            (costs one decoding pass). Defaults to `True`.

    Returns:
        An `ImageDirSource` (sharded by file under `data.shard_policy=file`).

    Raises:
        ConfigError: naming the key of a missing folder, a folder without images, a
            class folder without images, an image that does not decode, or
            validation classes that differ from the training ones.
    """
    if channels not in (1, 3, 4):
        raise ConfigError("data.source.channels", "must be 1, 3 or 4", value=channels)
    listing = _listing("data.source.path", path, extensions)
    class_names = list(listing)
    all_files = [f for name in class_names for f in listing[name]]
    all_labels = [i for i, name in enumerate(class_names) for _ in listing[name]]
    if validation_path:
        val_listing = _listing("data.source.validation_path", validation_path, extensions)
        if list(val_listing) != class_names:
            raise ConfigError(
                "data.source.validation_path",
                f"has classes {list(val_listing)}, not the training ones {class_names}",
                value=validation_path,
            )
        files = {"train": all_files, "validation": [f for n in class_names for f in val_listing[n]]}
        labels = {
            "train": all_labels,
            "validation": [i for i, n in enumerate(class_names) for _ in val_listing[n]],
        }
    else:
        try:
            train, val = split_indices(len(all_files), validation_fraction, split_seed)
        except ValueError as error:
            raise ConfigError(
                "data.source.validation_fraction", str(error), value=validation_fraction
            ) from None
        files = {
            "train": [all_files[i] for i in train],
            "validation": [all_files[i] for i in val],
        }
        labels = {
            "train": [all_labels[i] for i in train],
            "validation": [all_labels[i] for i in val],
        }
    if image_size is None:
        first = tf.io.decode_image(
            tf.io.read_file(all_files[0]), channels=channels, expand_animations=False
        )
        size = (int(first.shape[0]), int(first.shape[1]))
    else:
        size_list = [int(d) for d in image_size]
        if len(size_list) != 2 or min(size_list) < 1:
            raise ConfigError(
                "data.source.image_size", "must be [height, width]", value=list(image_size)
            )
        size = (size_list[0], size_list[1])
    if len(class_names) < 2:
        raise ConfigError(
            "data.source.path", f"has one class folder ({class_names[0]}); need two or more"
        )
    if verify_images:
        verify("data.source.path", all_files, channels)
        if validation_path:
            verify("data.source.validation_path", files["validation"], channels)
    return ImageDirSource(
        files=files,
        labels={k: [int(v) for v in np.asarray(v, np.int64)] for k, v in labels.items()},
        class_names=class_names,
        image_size=size,
        channels=channels,
    )
