"""An in-memory source handed out the way the whole-file TFRecord reader hands out files.

Comparison 4 uses it for floors under the TFRecord reader: the arrays are cut into equal
blocks ("files"), each block comes out of a parallel `map` over the block numbers (a
slice of the arrays: nothing parsed or copied) and the blocks are interleaved with
`interleave_files`, as `TFRecordSource.read` does with the files it reads whole.

- With nothing read, the difference from the in-memory source is the cost of that
  pipeline shape.
- With `read_path` (a folder of TFRecord files with a kdist manifest, as many training
  files as blocks), each block also reads its file's bytes on every pass
  (`tf.io.read_file`), and with `checksum` compares their farmhash64 with the
  manifest's, as the whole-file reader does; the examples still come from the arrays.
  That is the floor of any reader that reads the files on every pass: what is left
  between it and the TFRecord side is cutting and parsing the records.

The bytes reach the examples through a data dependency (each label plus 0 times the
file's length): TensorFlow prunes stateless work that only a control dependency needs,
so a `tf.control_dependencies` on the read would measure nothing (a 200 MB
`read_file` under one took 0.7 ms, under a data dependency 100 ms).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import tensorflow as tf

from kdist.data.builtin import synthetic
from kdist.data.source import ArraySource
from kdist.data.tfrecords import MANIFEST_NAME, interleave_files, read_manifest

__all__ = ["FileBlocks", "file_blocks"]


class FileBlocks(ArraySource):
    """`ArraySource` whose `dataset` yields its examples in per-file blocks.

    Args:
        blocks: how many equal blocks ("files") the arrays are cut into.
        read_files: a file per block whose bytes each block reads on every pass, or
            `None` to read nothing. Defaults to `None`.
        fingerprints: the farmhash64 of each of `read_files` (8 bytes each), compared
            with the bytes read on every pass, or `None`. Defaults to `None`.
        **arrays: the `ArraySource` arguments.
    """

    def __init__(
        self,
        *,
        blocks: int,
        read_files: list[str] | None = None,
        fingerprints: list[bytes] | None = None,
        **arrays: Any,
    ):
        super().__init__(**arrays)
        if read_files is not None and len(read_files) != blocks:
            raise ValueError(f"{len(read_files)} files to read for {blocks} blocks.")
        self.blocks = blocks
        self.read_files = read_files
        self.fingerprints = fingerprints

    def dataset(self, split: str) -> tf.data.Dataset:
        size = self.size(split)
        if size % self.blocks:
            raise ValueError(f"{size} {split} examples do not cut into {self.blocks} blocks.")
        per_file = size // self.blocks
        arrays = tf.nest.map_structure(tf.constant, self.arrays(split))
        paths = (
            None if self.read_files is None or split != "train" else tf.constant(self.read_files)
        )
        expected = (
            None
            if self.fingerprints is None
            else tf.constant(np.array([np.frombuffer(f, np.uint8) for f in self.fingerprints]))
        )

        def block(index: tf.Tensor) -> Any:
            start = index * per_file
            x, y, *rest = (a[start : start + per_file] for a in arrays)
            if paths is not None:
                data = tf.io.read_file(tf.gather(paths, index))
                if expected is not None:
                    checksum = tf.fingerprint(tf.reshape(data, [1]), method="farmhash64")[0]
                    ok = tf.reduce_all(tf.equal(checksum, tf.gather(expected, index)))
                    with tf.control_dependencies([tf.debugging.Assert(ok, ["checksum"])]):
                        data = tf.identity(data)
                zero = tf.cast(tf.strings.length(data) * 0, y.dtype)
                y = y + zero
            return (x, y, *rest)

        numbers = tf.data.Dataset.range(self.blocks)
        blocks = numbers.map(block, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return interleave_files(blocks)


def file_blocks(
    *, blocks: int = 4, read_path: str | None = None, checksum: bool = False, **synthetic_args: Any
) -> FileBlocks:
    """kdist's synthetic data (`kdist.data.synthetic`, given `synthetic_args`) as a `FileBlocks`.

    Args:
        blocks: how many blocks. Defaults to `4`.
        read_path: a folder of TFRecord files with a kdist manifest whose training files
            (one per block) each block reads on every pass. Defaults to `None`.
        checksum: also compare each file's farmhash64 with the manifest's on every
            pass. Defaults to `False`.
        **synthetic_args: the arguments of `kdist.data.synthetic`.
    """
    source = synthetic(**synthetic_args)
    (x_train, y_train), (x_validation, y_validation) = (
        source.arrays(split) for split in ("train", "validation")
    )
    read_files = fingerprints = None
    if read_path is not None:
        shards = read_manifest(os.path.join(read_path, MANIFEST_NAME)).splits["train"]
        read_files = [shard.path for shard in shards]
        if checksum:
            fingerprints = [bytes.fromhex(str(shard.fingerprint)) for shard in shards]
    return FileBlocks(
        blocks=blocks,
        read_files=read_files,
        fingerprints=fingerprints,
        x_train=x_train,
        y_train=y_train,
        x_validation=x_validation,
        y_validation=y_validation,
        num_classes=source.num_classes,
    )
