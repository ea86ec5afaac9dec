"""Training-time image augmentation (`data.augment`): random flips and pad-and-crop.

Random choices come from stateless ops seeded per example by `tf.data.Dataset.random`,
so a run is reproducible for a given seed and the map can run in parallel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from kdist.config.constants import FLIP_MODES
from kdist.config.errors import ConfigError
from kdist.config.validate import check_choice

__all__ = ["FLIP_MODES", "augment", "check_augment", "is_enabled"]


def is_enabled(augment_cfg: Any) -> bool:
    """Whether the `data.augment` node asks for any augmentation."""
    if augment_cfg is None:
        return False
    return (
        bool(augment_cfg.get("random_flip")) or int(augment_cfg.get("random_crop_padding") or 0) > 0
    )


def check_augment(augment_cfg: Any, input_shape: Sequence[int]) -> tuple[str | None, int]:
    """Check the `data.augment` node against the data's shape.

    Returns:
        `(random_flip, random_crop_padding)`.

    Raises:
        ConfigError: naming the key for a bad value or data that are not images.
    """
    flip = augment_cfg.get("random_flip")
    padding = int(augment_cfg.get("random_crop_padding") or 0)
    check_choice("data.augment.random_flip", flip, FLIP_MODES)
    if padding < 0:
        raise ConfigError("data.augment.random_crop_padding", "must be >= 0", value=padding)
    if len(tuple(input_shape)) != 3:
        key = "data.augment.random_flip" if flip else "data.augment.random_crop_padding"
        raise ConfigError(
            key,
            f"needs images (height, width, channels); this data has shape {tuple(input_shape)}",
            hint=f"remove it: {key}=" + ("null" if flip else "0"),
        )
    return flip, padding


def augment(
    dataset: tf.data.Dataset,
    augment_cfg: Any,
    *,
    input_shape: Sequence[int],
    seed: int,
    skip: int = 0,
) -> tf.data.Dataset:
    """Apply the `data.augment` node to unbatched `(image, label)` examples.

    Args:
        dataset: unbatched training examples.
        augment_cfg: the `data.augment` node: `random_flip` (null, horizontal, vertical,
            horizontal_and_vertical) and `random_crop_padding` (pixels of zero padding on
            each side before a random crop back to the image size; 0 for none).
        input_shape: `(height, width, channels)` of one image.
        seed: seed of the random stream.
        skip: examples of the stream already used (a resumed run). Defaults to `0`.

    Returns:
        The augmented dataset (unchanged when nothing is enabled).

    Raises:
        ConfigError: naming the `data.augment` key for a bad value or non-image data.
    """
    if not is_enabled(augment_cfg):
        return dataset
    flip, padding = check_augment(augment_cfg, input_shape)
    height, width, channels = (int(d) for d in input_shape)

    def transform(example: Any, seed_pair: tf.Tensor) -> Any:
        image, rest = example[0], example[1:]
        seeds = tf.random.experimental.stateless_split(seed_pair, num=3)
        if flip in ("horizontal", "horizontal_and_vertical"):
            image = tf.image.stateless_random_flip_left_right(image, seeds[0])
        if flip in ("vertical", "horizontal_and_vertical"):
            image = tf.image.stateless_random_flip_up_down(image, seeds[1])
        if padding:
            padded = tf.pad(image, [[padding, padding], [padding, padding], [0, 0]])
            image = tf.image.stateless_random_crop(padded, (height, width, channels), seeds[2])
        return (image, *rest)

    seeds = tf.data.Dataset.random(seed=seed).batch(2, drop_remainder=True).skip(skip)
    return tf.data.Dataset.zip((dataset, seeds)).map(
        transform, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
