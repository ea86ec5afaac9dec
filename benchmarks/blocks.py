"""An in-memory source handed out the way the whole-file TFRecord reader hands out files.

Comparison 4 uses it as the floor of any source that produces its examples in per-file
blocks on every pass: the arrays are cut into equal blocks ("files"), each block comes
out of a parallel `map` over the block numbers (a slice of the arrays: nothing is read,
parsed or copied) and the blocks are interleaved with `interleave_files`, as
`TFRecordSource.read` does with the files it reads whole. The difference between this
side and the in-memory source is the cost of that pipeline shape; the difference between
the TFRecord side and this one is the cost of reading, checking and parsing.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from kdist.data.builtin import synthetic
from kdist.data.source import ArraySource
from kdist.data.tfrecord_io import interleave_files

__all__ = ["FileBlocks", "file_blocks"]


class FileBlocks(ArraySource):
    """`ArraySource` whose `dataset` yields its examples in per-file blocks.

    Args:
        blocks: how many equal blocks ("files") the arrays are cut into.
        **arrays: the `ArraySource` arguments.
    """

    def __init__(self, *, blocks: int, **arrays: Any):
        super().__init__(**arrays)
        self.blocks = blocks

    def dataset(self, split: str) -> tf.data.Dataset:
        size = self.size(split)
        if size % self.blocks:
            raise ValueError(f"{size} {split} examples do not cut into {self.blocks} blocks.")
        per_file = size // self.blocks
        arrays = tf.nest.map_structure(tf.constant, self.arrays(split))

        def block(index: tf.Tensor) -> Any:
            start = index * per_file
            return tf.nest.map_structure(lambda a: a[start : start + per_file], arrays)

        numbers = tf.data.Dataset.range(self.blocks)
        blocks = numbers.map(block, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return interleave_files(blocks)


def file_blocks(*, blocks: int = 4, **synthetic_args: Any) -> FileBlocks:
    """kdist's synthetic data (`kdist.data.synthetic`, given `synthetic_args`) as a `FileBlocks`."""
    source = synthetic(**synthetic_args)
    (x_train, y_train), (x_validation, y_validation) = (
        source.arrays(split) for split in ("train", "validation")
    )
    return FileBlocks(
        blocks=blocks,
        x_train=x_train,
        y_train=y_train,
        x_validation=x_validation,
        y_validation=y_validation,
        num_classes=source.num_classes,
    )
