"""TFRecord files with a record-count manifest: writing them, and reading them with checks.

TensorFlow on its own raises `DataLossError` (without the file's name) at a corrupt
record, drops the rest of the file silently under `ignore_errors`, and reads a file cut
inside a record header short with no error at all. kdist writes a manifest beside the
shards (`manifest.json`: the feature spec and, per split, each file's record count and
size) and checks every file against it, so both cases fail naming the file.

There are two readers. An uncompressed file whose records all have one length (most
files of fixed-shape features) also gets that length and a checksum of the whole file
in the manifest (`record_bytes`, `fingerprint`), and can be read whole
(`read_whole_file`): one read and one checksum per file, the records cut out at
their offsets, no per-record work before the parse. Other files are read record by
record by TensorFlow's reader, which checks each record's CRC (`record_batches`).
Both give the same records, in the same order when the files are of equal size.

It stays one file (over 400 lines): the writer and the reader share the manifest format
(`FeatureSpec`, `Shard`, `Manifest`), which must change on both sides at once.

Example:

```python
from kdist.data.tfrecord_io import write_tfrecords

write_tfrecords("data/digits", {"train": (x_train, y_train), "validation": (x_val, y_val)},
                num_shards={"train": 3, "validation": 1})
# then: python -m kdist.train data=tfrecord data.source.path=data/digits
```
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.files import expand_files
from kdist.fileio import atomic_path, write_text_atomic

__all__ = [
    "FINGERPRINT_MAX_BYTES",
    "MANIFEST_NAME",
    "READ_BATCH",
    "FeatureSpec",
    "Manifest",
    "Shard",
    "check_batch",
    "checked_records",
    "interleave_files",
    "parse_fn",
    "read_manifest",
    "read_whole_file",
    "record_batches",
    "scan_file",
    "whole_file_entry",
    "whole_files",
    "write_manifest",
    "write_tfrecords",
]

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
_FORMAT = "kdist-tfrecord"
_VERSION = 1
# Each TFRecord record is framed by an 8-byte length, a 4-byte length CRC and a 4-byte
# data CRC: an uncompressed file is exactly sum(16 + payload) bytes long.
_FRAME_BYTES = 16
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


# --- writing ----------------------------------------------------------------------------


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
        "format": _FORMAT,
        "version": _VERSION,
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
        "format": _FORMAT,
        "version": _VERSION,
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


# --- reading ----------------------------------------------------------------------------


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
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ConfigError(path, f"is not a kdist TFRecord manifest (format {_FORMAT!r})")
    if data.get("version") != _VERSION:
        raise ConfigError(path, f"has version {data.get('version')!r}; kdist reads {_VERSION}")
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
                    hint="write the manifest again with kdist.data.tfrecord_io.write_manifest",
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


def scan_file(path: str, compression: str | None = None) -> tuple[int, int, bool]:
    """Read a TFRecord file once, eagerly.

    Returns:
        `(records, framed_bytes, failed)`: the records read before the end or the first
        corrupt record, the bytes they occupy in an uncompressed file, and whether a
        corrupt record stopped the read.
    """
    records = tf.data.TFRecordDataset(path, compression_type=compression or "")
    count = framed = 0
    try:
        for batch in records.batch(1024):
            count += int(batch.shape[0])
            framed += int(tf.reduce_sum(tf.strings.length(batch))) + _FRAME_BYTES * int(
                batch.shape[0]
            )
    except tf.errors.DataLossError:
        # Records of the batch that failed are lost with it: count them one at a time.
        count = framed = 0
        try:
            for record in tf.data.TFRecordDataset(path, compression_type=compression or ""):
                count += 1
                framed += int(tf.strings.length(record)) + _FRAME_BYTES
        except tf.errors.DataLossError:
            return count, framed, True
    return count, framed, False


# Records read, counted and parsed together: per-element tf.data work is what costs on
# small examples (a `parse_single_example` per record ran at a fifth of in-memory speed).
# It is also the block of records each file contributes in turn (see `record_batches`).
READ_BATCH = 256
# TFRecordDataset's read buffer per file (TensorFlow's default).
_READ_BUFFER = 256 * 1024


def _file_batches(path: tf.Tensor, count: tf.Tensor, compression_type: str) -> tf.data.Dataset:
    """One file's records in batches of `READ_BATCH`, then an empty batch marking its end.

    Each element is `(records, first, (path, count))`: `first` is the position in the
    file of the batch's first record. The reader is the `TFRecordDataset` op itself:
    `tf.data.TFRecordDataset` wraps it in a `flat_map` whose function TensorFlow
    instantiates again for every file on every pass over the data: about 1 ms per file,
    a quarter of reading 1,024 records of 784 floats. No stage here takes a function.
    """
    reader = tf.raw_ops.TFRecordDataset(
        filenames=path, compression_type=compression_type, buffer_size=_READ_BUFFER
    )
    records = tf.data.experimental.from_variant(reader, tf.TensorSpec([], tf.string))
    # A corrupt record ends the file (TensorFlow's `DataLossError` does not name it), so
    # the file reads short and `check_batch` fails naming it.
    batches = (
        records.ignore_errors(log_warning=False)
        .batch(READ_BATCH)
        .concatenate(tf.data.Dataset.from_tensors(tf.zeros([0], tf.string)))
    )
    first = tf.data.Dataset.range(0, np.iinfo(np.int64).max, READ_BATCH)
    about = tf.data.Dataset.from_tensors((path, count)).repeat()
    return tf.data.Dataset.zip((batches, first, about))


def record_batches(
    paths: Sequence[str],
    expected: Sequence[int],
    *,
    compression: str | None = None,
    cycle_length: int = 4,
) -> tf.data.Dataset:
    """The serialized records of `paths` in batches, to be checked with `check_batch`.

    Files are read `cycle_length` at a time, in a fixed order: a batch of up to
    `READ_BATCH` consecutive records of each file in turn (the last batch of a file may
    be shorter), and after a file's last batch an empty one that marks its end. Each
    element is `(records, first, (path, count))`: a vector of records, the position
    of the first in its file, and the file with its expected record count; `check_batch`
    takes these and fails on a file that reads short or long.

    Args:
        paths: the files.
        expected: each file's record count.
        compression: `None`, `"GZIP"` or `"ZLIB"`. Defaults to `None`.
        cycle_length: files read at once. Defaults to `4`.

    Returns:
        A dataset of `(string vector, int64 scalar, (string scalar, int64 scalar))`.
    """
    if len(paths) != len(expected):
        raise ValueError(f"{len(paths)} paths but {len(expected)} expected counts.")
    compression_type = compression or ""
    files = tf.data.Dataset.from_tensor_slices(
        (tf.constant(list(paths), tf.string), tf.constant(list(expected), tf.int64))
    )
    return files.interleave(
        lambda path, count: _file_batches(path, count, compression_type),
        cycle_length=max(1, min(cycle_length, len(paths))),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


# Files up to this size get a record length and a checksum in the manifest when written
# (`whole_file_entry`); the reader decides which of them it reads whole.
FINGERPRINT_MAX_BYTES = 256 * 1024 * 1024


def _fingerprint(data: tf.Tensor) -> tf.Tensor:
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
    if len(data) < _FRAME_BYTES:
        return {}
    length = int.from_bytes(data[:8], "little")
    step = length + _FRAME_BYTES
    if len(data) % step:
        return {}
    heads = np.frombuffer(data, np.uint8).reshape(-1, step)[:, :8]
    if not np.all(np.ascontiguousarray(heads).view("<u8") == length):
        return {}
    fingerprint = _fingerprint(tf.constant(data)).numpy().tobytes().hex()
    return {"record_bytes": length, "fingerprint": fingerprint}


def read_whole_file(
    path: tf.Tensor, count: tf.Tensor, length: tf.Tensor, fingerprint: tf.Tensor
) -> tf.Tensor:
    """The records of one file (an element of `whole_files`), read whole and checked.

    The file is read in one piece and its size and farmhash64 are compared with the
    manifest's, so a file changed in any way since the manifest was written fails with
    `tf.errors.InvalidArgumentError` naming it, before any of its records is used. The
    records are then cut out at their offsets: no per-record work until the parse.

    Returns:
        A string vector of the `count` records.
    """
    data = tf.io.read_file(path)
    step = length + _FRAME_BYTES
    size = tf.cast(tf.strings.length(data, unit="BYTE"), tf.int64)
    ok = tf.logical_and(
        tf.equal(size, count * step),
        tf.reduce_all(tf.equal(_fingerprint(data), fingerprint)),
    )
    # One message per file, not per record. No `tf.cond`: TensorFlow instantiates a
    # pipeline's functions again on every pass, and branches make them larger.
    message = tf.strings.format(
        "kdist: TFRecord file {} is corrupt or truncated: its {} bytes do not match the "
        "size and checksum of the {} records its manifest lists",
        (path, size, count),
    )
    with tf.control_dependencies([tf.debugging.Assert(ok, [message])]):
        data = tf.identity(data)
    # A record: 8-byte length, 4-byte length CRC, payload, 4-byte payload CRC.
    return tf.strings.substr(data, tf.range(count) * step + 12, tf.fill([count], length))


def whole_files(shards: Sequence[Shard]) -> tf.data.Dataset:
    """`(path, records, record_bytes, fingerprint)` of each shard, for `read_whole_file`.

    Raises:
        ValueError: for a shard without a record length or checksum.
    """
    for shard in shards:
        if shard.record_bytes is None or shard.fingerprint is None:
            raise ValueError(f"{shard.path} cannot be read whole: no record_bytes/fingerprint.")
    fingerprints = np.array(
        [np.frombuffer(bytes.fromhex(str(s.fingerprint)), np.uint8) for s in shards], np.uint8
    ).reshape(-1, 8)
    return tf.data.Dataset.from_tensor_slices(
        (
            tf.constant([s.path for s in shards], tf.string),
            tf.constant([s.records for s in shards], tf.int64),
            tf.constant([s.record_bytes for s in shards], tf.int64),
            tf.constant(fingerprints),
        )
    )


def interleave_files(per_file: tf.data.Dataset, *, cycle_length: int = 4) -> tf.data.Dataset:
    """The examples of `per_file` (one element of stacked examples per file), interleaved.

    Files are taken `cycle_length` at a time, `READ_BATCH` consecutive examples of each
    in turn, the next file opening when one ends. That is the order of `record_batches`
    for files of equal size; with others, its empty block after a file's last keeps the
    next file out for one more turn. The interleave is sequential; its per-example cost
    is that of an `unbatch`.
    """
    return per_file.interleave(
        lambda *example: tf.data.Dataset.from_tensor_slices(example),
        cycle_length=cycle_length,
        block_length=READ_BATCH,
    )


def check_batch(
    records: tf.Tensor, first: tf.Tensor, file: tuple[tf.Tensor, tf.Tensor]
) -> tf.Tensor:
    """`records` (an element of `record_batches`), or an error if its file's count is wrong.

    Only the last batch of a file may be short, and it must end at the file's expected
    count; the empty batch after it must not come before that count. A file that reads
    short (a corrupt record or a cut) or long then raises `tf.errors.InvalidArgumentError`
    whose message names the file, the records read and the count expected. The check is
    a few scalar operations per batch, and the message is built only when it fails, so
    it costs nothing per record.

    Args:
        records: the batch of serialized records.
        first: the position of its first record in the file.
        file: `(path, expected count)`.

    Returns:
        `records`.
    """
    path, count = file
    size = tf.size(records, out_type=tf.int64)
    read = first + size
    ok = tf.where(
        size == 0,
        first >= count,
        tf.where(size == READ_BATCH, read <= count, tf.equal(read, count)),
    )

    def fail() -> tf.Tensor:
        # The message is built only here, when a count is wrong.
        message = tf.strings.format(
            "kdist: TFRecord file {} is corrupt or truncated: read {} of the {} records "
            "its manifest lists",
            (path, read, count),
        )
        with tf.control_dependencies([tf.debugging.Assert(False, [message])]):
            return tf.identity(records)

    return tf.cond(ok, lambda: records, fail)


def checked_records(
    paths: Sequence[str],
    expected: Sequence[int],
    *,
    compression: str | None = None,
    cycle_length: int = 4,
) -> tf.data.Dataset:
    """The serialized records of `paths`, failing when a file yields a wrong record count.

    A corrupt record ends its file (instead of TensorFlow's `DataLossError`, which does
    not name the file), and a file cut inside a record header reads short; either way
    the file then yields fewer records than `expected`, and reading raises
    `tf.errors.InvalidArgumentError` whose message names the file and both counts.
    The records come in the order of `record_batches`; each batch is checked with
    `check_batch`, so the check costs nothing per record.

    Args:
        paths: the files, read `cycle_length` at a time, `READ_BATCH` records of each
            in turn.
        expected: each file's record count.
        compression: `None`, `"GZIP"` or `"ZLIB"`. Defaults to `None`.
        cycle_length: files read at once. Defaults to `4`.

    Returns:
        A dataset of scalar string tensors.
    """
    batches = record_batches(paths, expected, compression=compression, cycle_length=cycle_length)
    return batches.map(
        check_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    ).unbatch()


def parse_fn(
    manifest: Manifest,
    *,
    batched: bool = False,
    targets: Sequence[str] | None = None,
    weight: str | None = None,
) -> Callable[[tf.Tensor], tuple[Any, ...]]:
    """The function from a serialized `tf.train.Example` to `(features, label)` tensors.

    Features come back in their stored dtype (see `kdist.data.files.model_tensor` for
    what the model gets); integer targets as int32, float targets as float32.

    Args:
        manifest: the files' manifest.
        batched: the function takes a vector of records and returns batches
            (`tf.io.parse_example`), for `list` and `raw` features. Defaults to `False`.
        targets: the target features: one name gives a tensor, several a dict by name.
            Defaults to `None`: the manifest's `label_key`.
        weight: a scalar float feature of per-example sample weights, returned third.
            Defaults to `None`.

    Raises:
        ValueError: for `batched` with an `image` feature (decoded one at a time).
    """
    name = manifest.feature_key
    labels = list(targets or [manifest.label_key])
    spec = manifest.features[name]
    dtype = tf.as_dtype(spec.dtype)
    if spec.encoding == "list":
        stored = tf.float32 if dtype.is_floating else tf.int64
        feature = tf.io.FixedLenFeature(spec.shape, stored)
    else:
        feature = tf.io.FixedLenFeature([], tf.string)
    schema = {name: feature}
    floats = {}
    for label in labels:
        floats[label] = tf.as_dtype(manifest.features[label].dtype).is_floating
        schema[label] = tf.io.FixedLenFeature(
            manifest.features[label].shape, tf.float32 if floats[label] else tf.int64
        )
    if weight:
        schema[weight] = tf.io.FixedLenFeature([], tf.float32)
    if batched and spec.encoding == "image":
        raise ValueError("image features are decoded one record at a time; use batched=False.")

    def target(parsed: dict[str, tf.Tensor], label: str) -> tf.Tensor:
        return tf.cast(parsed[label], tf.float32 if floats[label] else tf.int32)

    def parse(record: tf.Tensor) -> tuple[Any, ...]:
        parsed = (tf.io.parse_example if batched else tf.io.parse_single_example)(record, schema)
        value = parsed[name]
        if spec.encoding == "raw":
            shape = [-1, *spec.shape] if batched else list(spec.shape)
            value = tf.reshape(tf.io.decode_raw(value, dtype), shape)
        elif spec.encoding == "image":
            value = tf.io.decode_image(value, channels=spec.shape[-1], expand_animations=False)
            value = tf.reshape(value, spec.shape)
        y: Any = (
            target(parsed, labels[0])
            if targets is None or len(labels) == 1
            else {label: target(parsed, label) for label in labels}
        )
        if weight:
            return tf.cast(value, dtype), y, parsed[weight]
        return tf.cast(value, dtype), y

    return parse
