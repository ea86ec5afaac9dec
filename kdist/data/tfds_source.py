"""The `tfds` source: any prepared TensorFlow Datasets dataset, never downloaded.

Needs the optional extra: `pip install "kdist[tfds]"`.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.files import model_tensor
from kdist.data.source import Source

__all__ = ["TfdsSource", "tfds"]


class TfdsSource(Source):
    """Examples of a prepared TFDS builder; build it with `kdist.data.tfds`.

    Sharded by example (`data.shard_policy=auto` falls back to `data`).
    """

    def __init__(
        self,
        *,
        builder: Any,
        splits: dict[str, str | None],
        feature_key: str,
        label_key: str,
        scale: float | None,
    ):
        self.builder = builder
        self._splits = splits
        self._feature_key = feature_key
        self._label_key = label_key
        self._scale = scale
        features = builder.info.features
        self.input_shape = tuple(int(d) for d in features[feature_key].shape)
        self.num_classes = int(features[label_key].num_classes)

    def size(self, split: str) -> int:
        name = self._splits[split]
        return int(self.builder.info.splits[name].num_examples) if name else 0

    def dataset(self, split: str) -> tf.data.Dataset:
        name = self._splits[split]
        if not name:
            return tf.data.Dataset.from_tensors(
                (tf.zeros(self.input_shape), tf.constant(0, tf.int32))
            ).take(0)
        feature_key, label_key, scale = self._feature_key, self._label_key, self._scale
        examples = self.builder.as_dataset(split=name, shuffle_files=False)

        def example(item: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
            return model_tensor(item[feature_key], scale), tf.cast(item[label_key], tf.int32)

        return examples.map(example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def tfds(
    *,
    name: str,
    data_dir: str | None = None,
    train_split: str = "train",
    validation_split: str | None = "test",
    feature_key: str = "image",
    label_key: str = "label",
    scale: float | None = None,
) -> TfdsSource:
    """A dataset prepared by TensorFlow Datasets under `data_dir`; nothing is downloaded.

    Args:
        name: the TFDS name, e.g. `"mnist"` or `"cifar10:3.0.2"`.
        data_dir: where it was prepared (`tfds build`). Defaults to `None`: TFDS's
            default (`$TFDS_DATA_DIR` or `~/tensorflow_datasets`).
        train_split: the training split, slices allowed (`"train[:90%]"`).
            Defaults to `"train"`.
        validation_split: the validation split, or `None`. Defaults to `"test"`.
        feature_key: the feature the model reads (fixed shape). Defaults to `"image"`.
        label_key: a `ClassLabel` feature. Defaults to `"label"`.
        scale: multiply the features by this. Defaults to `None`: `uint8` becomes
            [0, 1] floats, other integers int32, floats float32.

    Returns:
        A `TfdsSource`.

    Raises:
        ConfigError: naming the key when tensorflow-datasets is not installed, the name
            is unknown, the dataset is not prepared under `data_dir`, or a key is wrong.
    """
    try:
        import tensorflow_datasets as tfds_lib
    except ImportError:
        raise ConfigError(
            "data.source",
            "data=tfds needs tensorflow-datasets, which is not installed",
            hint='pip install "kdist[tfds]"',
        ) from None
    try:
        builder = tfds_lib.builder(name, data_dir=data_dir)
    except tfds_lib.core.registered.DatasetNotFoundError:
        raise ConfigError(
            "data.source.name",
            f"is neither a TFDS dataset nor prepared under data_dir ({data_dir})",
            value=name,
        ) from None
    if not builder.is_prepared():
        raise ConfigError(
            "data.source.data_dir",
            f"has no prepared {name}: expected {builder.data_dir} (kdist does not download)",
            value=data_dir,
            hint=f"run `tfds build {name}` where there is network and copy its folder here",
        )
    features = builder.info.features
    for key, value in (("feature_key", feature_key), ("label_key", label_key)):
        if value not in features:
            raise ConfigError(
                f"data.source.{key}",
                f"is not a feature of {name}",
                value=value,
                hint=f"features: {', '.join(features.keys())}",
            )
    shape = features[feature_key].shape
    if any(d is None for d in shape):
        raise ConfigError(
            "data.source.feature_key",
            f"has a variable shape {shape}; kdist batches fixed-shape features",
            value=feature_key,
        )
    if not hasattr(features[label_key], "num_classes"):
        raise ConfigError("data.source.label_key", "is not a ClassLabel feature", value=label_key)
    splits = {"train": train_split, "validation": validation_split}
    for key, split in (("train_split", train_split), ("validation_split", validation_split)):
        if not split:
            continue
        try:
            builder.info.splits[split]
        except (KeyError, ValueError):
            raise ConfigError(
                f"data.source.{key}",
                f"is not a split of {name}",
                value=split,
                hint=f"splits: {', '.join(builder.info.splits.keys())}",
            ) from None
    return TfdsSource(
        builder=builder,
        splits=splits,
        feature_key=feature_key,
        label_key=label_key,
        scale=scale,
    )
