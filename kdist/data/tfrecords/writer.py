"""Writing TFRecord shards and their manifest.

Example:

```python
from kdist.data.tfrecords import write_tfrecords

write_tfrecords("data/digits", {"train": (x_train, y_train), "validation": (x_val, y_val)},
                num_shards={"train": 3, "validation": 1})
# then: python -m kdist.train data=tfrecord data.source.path=data/digits
```
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.files import expand_files
from kdist.data.tfrecords.checks import scan_file
from kdist.data.tfrecords.manifest import (
    COMPRESSIONS,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_NAME,
    FeatureSpec,
    read_manifest,
    whole_file_entry,
)
from kdist.runs.fileio import atomic_path, write_text_atomic

__all__ = ["write_manifest", "write_tfrecords"]


def _default_spec(x: np.ndarray) -> FeatureSpec:
    shape = tuple(int(d) for d in x.shape[1:])
    if x.dtype == np.uint8:
        return FeatureSpec(shape, "uint8", "raw")
    if np.issubdtype(x.dtype, np.floating):
        return FeatureSpec(shape, "float32", "list")
    if np.issubdtype(x.dtype, np.integer):
        return FeatureSpec(shape, str(x.dtype), "list")
    raise ValueError(f"Features of dtype {x.dtype} cannot be written; use a number dtype.")


def _feature(value: np.ndarray, spec: FeatureSpec) -> tf.train.Feature:
    if spec.encoding == "raw":
        data = np.ascontiguousarray(value, dtype=np.dtype(spec.dtype)).tobytes()
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[data]))
    flat = np.asarray(value).reshape(-1)
    if np.issubdtype(np.dtype(spec.dtype), np.floating):
        return tf.train.Feature(float_list=tf.train.FloatList(value=flat.astype(np.float32)))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=flat.astype(np.int64)))


def write_tfrecords(
    directory: str | os.PathLike[str],
    splits: Mapping[str, tuple[np.ndarray, np.ndarray]],
    *,
    num_shards: int | Mapping[str, int] = 1,
    feature_key: str = "x",
    label_key: str = "y",
    num_classes: int | None = None,
    compression: str | None = None,
) -> Path:
    """Write arrays as TFRecord shards plus a `manifest.json` with every file's record count.

    Each split's examples are cut into `num_shards` contiguous files named
    `<split>-<index>-of-<count>.tfrecord`. Float features are stored as float lists,
    other integers as int64 lists, `uint8` (pixels) as raw bytes; labels as int64.
    Files are written under a temporary name and renamed when complete; the manifest
    is written last.

    Args:
        directory: the output folder (created if needed).
        splits: split name (`"train"`, `"validation"`) -> `(features, labels)` arrays,
            examples on the first axis.
        num_shards: files per split, one count for all or a mapping per split (1 for
            a split it leaves out). Defaults to `1`.
        feature_key: the feature's name in each `tf.train.Example`. Defaults to `"x"`.
        label_key: the label's name. Defaults to `"y"`.
        num_classes: recorded in the manifest. Defaults to `None`: one more than the
            largest label.
        compression: `None`, `"GZIP"` or `"ZLIB"`. Defaults to `None`.

    Returns:
        The path of the manifest.

    Raises:
        ValueError: for mismatched arrays, an unknown compression or bad shard counts.
    """
    if compression not in COMPRESSIONS:
        raise ValueError(f"`compression` ({compression!r}) must be one of None, GZIP, ZLIB.")
    if feature_key == label_key:
        raise ValueError(f"`feature_key` and `label_key` must differ (both {feature_key!r}).")
    if not splits:
        raise ValueError("`splits` is empty: give at least a 'train' split.")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    options = tf.io.TFRecordOptions(compression_type=compression or "")
    spec: FeatureSpec | None = None
    manifest_splits: dict[str, list[dict[str, Any]]] = {}
    largest = -1
    for split, (x, y) in splits.items():
        x, y = np.asarray(x), np.asarray(y).reshape(-1)
        if len(x) != len(y):
            raise ValueError(f"Split {split!r} has {len(x)} features but {len(y)} labels.")
        this_spec = _default_spec(x)
        if spec is not None and this_spec != spec:
            raise ValueError(f"Split {split!r} has features {this_spec}, other splits {spec}.")
        spec = this_spec
        count = num_shards.get(split, 1) if isinstance(num_shards, Mapping) else num_shards
        if not 1 <= int(count) <= max(1, len(x)):
            raise ValueError(
                f"`num_shards` for {split!r} ({count}) must be between 1 and its {len(x)} examples."
            )
        if len(y):
            largest = max(largest, int(y.max()))
        entries = []
        for index, part in enumerate(np.array_split(np.arange(len(x)), int(count))):
            name = f"{split}-{index:05d}-of-{int(count):05d}.tfrecord"
            with (
                atomic_path(out / name) as partial,
                tf.io.TFRecordWriter(str(partial), options) as writer,
            ):
                for i in part:
                    example = tf.train.Example(
                        features=tf.train.Features(
                            feature={
                                feature_key: _feature(x[i], spec),
                                label_key: tf.train.Feature(
                                    int64_list=tf.train.Int64List(value=[int(y[i])])
                                ),
                            }
                        )
                    )
                    writer.write(example.SerializeToString())
            entry = {"file": name, "records": len(part), "bytes": (out / name).stat().st_size}
            if compression is None:
                entry.update(whole_file_entry(str(out / name)))
            entries.append(entry)
        manifest_splits[split] = entries
    assert spec is not None
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "features": {
            feature_key: spec.to_json(),
            label_key: FeatureSpec((), "int64", "list").to_json(),
        },
        "feature_key": feature_key,
        "label_key": label_key,
        "num_classes": int(num_classes) if num_classes else largest + 1,
        "compression": compression,
        "splits": manifest_splits,
    }
    path = out / MANIFEST_NAME
    write_text_atomic(path, json.dumps(manifest, indent=2) + "\n")
    return path


def write_manifest(
    directory: str | os.PathLike[str],
    splits: Mapping[str, str | Sequence[str]],
    *,
    features: Mapping[str, Mapping[str, Any]],
    feature_key: str,
    label_key: str,
    num_classes: int,
    compression: str | None = None,
) -> Path:
    """Write a `manifest.json` for TFRecord files kdist did not write.

    Every file is read once: its records are counted, and a corrupt record or (for
    uncompressed files) a size that does not match its records refuses the file.

    Args:
        directory: the folder of the files; the manifest goes there and file paths in
            it are relative to it.
        splits: split name -> a glob pattern or a list of files (relative to `directory`
            or absolute).
        features: feature name -> `{"shape": [...], "dtype": ..., "encoding": ...}`, at
            least `feature_key` and `label_key`.
        feature_key: the feature the model reads.
        label_key: the integer class label.
        num_classes: number of classes.
        compression: `None`, `"GZIP"` or `"ZLIB"`. Defaults to `None`.

    Returns:
        The path of the manifest.

    Raises:
        ConfigError: naming a file that is corrupt or truncated, or a pattern that
            matches nothing.
    """
    base = Path(directory)
    entries: dict[str, list[dict[str, Any]]] = {}
    for split, patterns in splits.items():
        if isinstance(patterns, str):
            patterns = [patterns]
        resolved = [p if os.path.isabs(p) else str(base / p) for p in patterns]
        files = expand_files(f"splits.{split}", resolved)
        entries[split] = []
        for file in files:
            records, readable_bytes, failed = scan_file(file, compression)
            size = tf.io.gfile.stat(file).length
            if failed or (compression is None and readable_bytes != size):
                raise ConfigError(
                    file,
                    f"is corrupt or truncated: {records} readable records",
                    hint="restore the file before writing its manifest",
                )
            entry = {"file": os.path.relpath(file, base), "records": records, "bytes": size}
            if compression is None:
                entry.update(whole_file_entry(file))
            entries[split].append(entry)
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "features": {name: dict(spec) for name, spec in features.items()},
        "feature_key": feature_key,
        "label_key": label_key,
        "num_classes": int(num_classes),
        "compression": compression,
        "splits": entries,
    }
    # Parse it back so a bad feature spec fails now, not at training time.
    path = base / MANIFEST_NAME
    write_text_atomic(path, json.dumps(manifest, indent=2) + "\n")
    read_manifest(str(path))
    return path
