"""Reading the records of TFRecord files: record by record, or a file whole.

Two readers give the same records, in the same order when the files are of equal size.
An uncompressed file whose records all have one length (its manifest entry has
`record_bytes` and `fingerprint`) can be read whole (`read_whole_file`): one read and one
checksum per file, the records cut out at their offsets, no per-record work before the
parse. Other files are read record by record by TensorFlow's reader, which checks each
record's CRC (`record_batches`, checked per file by `kdist.data.tfrecords.checks`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from kdist.data.tfrecords.manifest import FRAME_BYTES, Shard, farmhash64

__all__ = ["READ_BATCH", "interleave_files", "read_whole_file", "record_batches", "whole_files"]

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
    step = length + FRAME_BYTES
    size = tf.cast(tf.strings.length(data, unit="BYTE"), tf.int64)
    ok = tf.logical_and(
        tf.equal(size, count * step),
        tf.reduce_all(tf.equal(farmhash64(data), fingerprint)),
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
