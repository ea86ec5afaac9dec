"""A checkpoint's files: one save's files linked as another's, and writes through the writer.

A step two savers save (the last backup and the last checkpoint) is written once and
hard-linked, index last, so a checkpoint is visible only when complete.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import tensorflow as tf

from kdist.engine.checkpoint.writer import HostWriter
from kdist.engine.state import CheckpointError

__all__ = ["TracedWrites", "link_checkpoint"]


def link_checkpoint(source: str, prefix: str) -> None:
    """Make checkpoint `prefix` the same files as checkpoint `source` (hard links).

    The data files first and the index last, as TensorFlow's own write: a checkpoint
    is found by its index, so a kill in between leaves no partial one in view. Copies
    where the folders cannot share a link (another filesystem).
    """
    files = sorted(
        Path(source).parent.glob(f"{Path(source).name}.*"), key=lambda f: f.suffix == ".index"
    )
    if not any(f.suffix == ".index" for f in files):
        raise CheckpointError(f"checkpoint {source} has no index file to link")
    for file in files:
        target = Path(f"{prefix}{file.name[len(Path(source).name) :]}")
        target.unlink(missing_ok=True)
        try:
            os.link(file, target)
        except OSError:
            shutil.copyfile(file, target)


class TracedWrites:
    """What `tf.train.CheckpointManager` uses of a checkpoint, writing through `writer`.

    The manager numbers the checkpoint, calls `_write`, then (through the write
    callbacks) records it in the state file and removes the oldest ones: all of it
    on the writer thread, after the files are complete.
    """

    def __init__(self, checkpoint: tf.train.Checkpoint, writer: HostWriter):
        self.save_counter = checkpoint.save_counter
        self._writer = writer
        # Set (on the writer thread) while a save links these files instead of writing.
        self.link_from: str | None = None

    def _write(self, file_prefix: str, options: Any = None) -> str:
        if self.link_from is not None:
            link_checkpoint(self.link_from, file_prefix)
        else:
            self._writer.write(file_prefix)
        for callback in getattr(options, "experimental_write_callbacks", None) or []:
            callback(file_prefix)
        return file_prefix

    def sync(self) -> None:
        """Nothing to wait for: the manager runs on the writer thread."""
