"""Checking TFRecord files against their manifest's record counts.

TensorFlow on its own raises `DataLossError` (without the file's name) at a corrupt
record, drops the rest of the file silently under `ignore_errors`, and reads a file cut
inside a record header short with no error at all. kdist compares every file's records
with the count its manifest lists, so both cases fail naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import tensorflow as tf

from kdist.data.tfrecords.manifest import FRAME_BYTES
from kdist.data.tfrecords.readers import READ_BATCH, record_batches

__all__ = ["check_batch", "checked_records", "corrupt_file_message", "scan_file"]


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
            framed += int(tf.reduce_sum(tf.strings.length(batch))) + FRAME_BYTES * int(
                batch.shape[0]
            )
    except tf.errors.DataLossError:
        # Records of the batch that failed are lost with it: count them one at a time.
        count = framed = 0
        try:
            for record in tf.data.TFRecordDataset(path, compression_type=compression or ""):
                count += 1
                framed += int(tf.strings.length(record)) + FRAME_BYTES
        except tf.errors.DataLossError:
            return count, framed, True
    return count, framed, False


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


def corrupt_file_message(error: Exception) -> str | None:
    """The one line to show for a data file found corrupt while training, else `None`.

    kdist's TFRecord check fails with a message naming the file ("... is corrupt or
    truncated ..."); TensorFlow's own reader (`data.integrity=off`) with a DataLossError.
    """
    text = str(getattr(error, "message", "") or error)
    named = re.search(r'file \\?"([^"\\]+)\\?" (is corrupt or truncated[^\]\n]*)', text)
    if named:
        return f"{named.group(1)}: {named.group(2).strip()}"
    for line in text.splitlines():
        if "corrupt or truncated" in line:
            return line[line.find("kdist: ") + 7 if "kdist: " in line else 0 :].strip()
    if isinstance(error, tf.errors.DataLossError):
        first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
        return f"a data file is corrupt (TensorFlow: {first[:300]})"
    return None
