"""The manifest of a folder of TFRecord files: its format, reading it, and a file's entry.

kdist writes a `manifest.json` beside the shards: the feature spec and, per split, each
file's record count and size. An uncompressed file whose records all have one length also
gets that length and a farmhash64 of the whole file (`record_bytes`, `fingerprint`), so it
can be read whole (`kdist.data.tfrecords.readers.read_whole_file`). The writer
(`kdist.data.tfrecords.writer`) and the readers share these definitions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError

__all__ = [
    "COMPRESSIONS",
    "ENCODINGS",
    "FINGERPRINT_MAX_BYTES",
    "FORMAT",
    "FORMAT_VERSION",
    "FRAME_BYTES",
    "MANIFEST_NAME",
    "FeatureSpec",
    "Manifest",
    "Shard",
    "farmhash64",
    "read_manifest",
    "whole_file_entry",
]

MANIFEST_NAME = "manifest.json"
FORMAT = "kdist-tfrecord"
FORMAT_VERSION = 1
# Each TFRecord record is framed by an 8-byte length, a 4-byte length CRC and a 4-byte
# data CRC: an uncompressed file is exactly sum(16 + payload) bytes long.
FRAME_BYTES = 16
ENCODINGS = ("list", "raw", "image")
COMPRESSIONS = (None, "GZIP", "ZLIB")


@dataclass(frozen=True)
class FeatureSpec:
    """How one feature of an example is stored.

    Args:
        shape: shape of the decoded value of one example.
        dtype: NumPy dtype name of the decoded value, e.g. `"float32"`, `"int64"`, `"uint8"`.
        encoding: `list` (a float or int64 list), `raw` (the array's bytes) or `image`
            (PNG/JPEG/BMP/GIF bytes). Defaults to `"list"`.
    """

    shape: tuple[int, ...]
    dtype: str
    encoding: str = "list"

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "encoding": self.encoding}


@dataclass(frozen=True)
class Shard:
    """One TFRecord file of a split.

    Args:
        path: the file.
        records: its record count.
        bytes: its size. Defaults to `None` (not checked).
        record_bytes: the payload length of every record, when all have one length.
            Defaults to `None`.
        fingerprint: farmhash64 of the whole file (`tf.fingerprint`), 16 hex digits.
            Defaults to `None`. With `record_bytes`, the file can be read whole.
    """

    path: str
    records: int
    bytes: int | None = None
    record_bytes: int | None = None
    fingerprint: str | None = None

    def readable_whole(self, max_bytes: int) -> bool:
        """Whether `read_whole_file` can read this file, being at most `max_bytes`."""
        return (
            self.record_bytes is not None
            and self.fingerprint is not None
            and self.bytes is not None
            and self.bytes <= max_bytes
        )


@dataclass(frozen=True)
class Manifest:
    """A parsed `manifest.json`."""

    path: str
    features: dict[str, FeatureSpec]
    feature_key: str
    label_key: str
    num_classes: int | None
    compression: str | None
    splits: dict[str, list[Shard]]


# Files up to this size get a record length and a checksum in the manifest when written
# (`whole_file_entry`); the reader decides which of them it reads whole.
FINGERPRINT_MAX_BYTES = 256 * 1024 * 1024


def farmhash64(data: tf.Tensor) -> tf.Tensor:
    """farmhash64 of a scalar string's bytes, as 8 uint8."""
    return tf.fingerprint(tf.reshape(data, [1]), method="farmhash64")[0]


def whole_file_entry(path: str) -> dict[str, Any]:
    """The manifest entries that let `read_whole_file` read an uncompressed file.

    Returns:
        `{"record_bytes": n, "fingerprint": hex}` when the file is at most
        `FINGERPRINT_MAX_BYTES` and all its records have a payload of `n` bytes (their
        length fields say so, and they tile the file exactly); else `{}`.
    """
    if tf.io.gfile.stat(path).length > FINGERPRINT_MAX_BYTES:
        return {}
    with tf.io.gfile.GFile(path, "rb") as handle:
        data = handle.read()
    if len(data) < FRAME_BYTES:
        return {}
    length = int.from_bytes(data[:8], "little")
    step = length + FRAME_BYTES
    if len(data) % step:
        return {}
    heads = np.frombuffer(data, np.uint8).reshape(-1, step)[:, :8]
    if not np.all(np.ascontiguousarray(heads).view("<u8") == length):
        return {}
    fingerprint = farmhash64(tf.constant(data)).numpy().tobytes().hex()
    return {"record_bytes": length, "fingerprint": fingerprint}


def _spec(key: str, name: str, node: Any) -> FeatureSpec:
    where = f"{key}: features.{name}"
    if not isinstance(node, Mapping):
        raise ConfigError(where, "must be a mapping with shape, dtype and encoding")
    try:
        shape = tuple(int(d) for d in node.get("shape", ()))
        dtype = str(np.dtype(node["dtype"]))
    except (KeyError, TypeError, ValueError):
        raise ConfigError(where, "needs a shape (list of ints) and a NumPy dtype") from None
    encoding = str(node.get("encoding", "list"))
    if encoding not in ENCODINGS:
        raise ConfigError(
            f"{where}.encoding",
            "is not a valid choice",
            value=encoding,
            hint="use list, raw or image",
        )
    if encoding == "image" and (len(shape) != 3 or dtype != "uint8"):
        raise ConfigError(where, "an image feature needs shape [height, width, channels] and uint8")
    return FeatureSpec(shape, dtype, encoding)


def read_manifest(path: str) -> Manifest:
    """Read and check a `manifest.json`.

    Args:
        path: the manifest file.

    Returns:
        The `Manifest`, with file paths made absolute.

    Raises:
        ConfigError: naming the manifest and what is wrong with it.
    """
    try:
        with tf.io.gfile.GFile(path, "r") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as error:
        raise ConfigError(path, f"is not valid JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(path, f"is not a kdist TFRecord manifest (format {FORMAT!r})")
    if data.get("version") != FORMAT_VERSION:
        raise ConfigError(
            path, f"has version {data.get('version')!r}; kdist reads {FORMAT_VERSION}"
        )
    base = os.path.dirname(path)
    features = {str(k): _spec(path, str(k), v) for k, v in (data.get("features") or {}).items()}
    feature_key, label_key = str(data.get("feature_key")), str(data.get("label_key"))
    for which, name in (("feature_key", feature_key), ("label_key", label_key)):
        if name not in features:
            raise ConfigError(
                path, f"{which} {name!r} is not among the features {sorted(features)}"
            )
    if features[label_key].encoding != "list":
        raise ConfigError(path, f"the label {label_key!r} must be a list feature (numbers)")
    compression = data.get("compression")
    if compression not in COMPRESSIONS:
        raise ConfigError(path, f"compression {compression!r} is not one of None, GZIP, ZLIB")
    splits: dict[str, list[Shard]] = {}
    for split, entries in (data.get("splits") or {}).items():
        shards = []
        for entry in entries:
            try:
                file = str(entry["file"])
                records = int(entry["records"])
                size = int(entry["bytes"]) if entry.get("bytes") is not None else None
                record_bytes = entry.get("record_bytes")
                record_bytes = int(record_bytes) if record_bytes is not None else None
                fingerprint = entry.get("fingerprint")
                if fingerprint is not None and len(bytes.fromhex(str(fingerprint))) != 8:
                    raise ValueError(fingerprint)
            except (KeyError, TypeError, ValueError):
                raise ConfigError(
                    path,
                    f"split {split!r} has an entry without file/records, or with a bad "
                    "record_bytes or fingerprint",
                    hint="write the manifest again with kdist.data.tfrecords.write_manifest",
                ) from None
            shards.append(
                Shard(
                    file if os.path.isabs(file) else os.path.join(base, file),
                    records,
                    size,
                    record_bytes,
                    None if fingerprint is None else str(fingerprint),
                )
            )
        splits[str(split)] = shards
    num_classes = data.get("num_classes")
    return Manifest(
        path=path,
        features=features,
        feature_key=feature_key,
        label_key=label_key,
        num_classes=int(num_classes) if num_classes else None,
        compression=compression,
        splits=splits,
    )
