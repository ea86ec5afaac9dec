"""The `tfrecord` source: TFRecord shards described by a kdist manifest, checked as read."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.files import FileSource, existing_path, model_tensor
from kdist.data.tfrecords import (
    MANIFEST_NAME,
    READ_BATCH,
    Manifest,
    check_batch,
    interleave_files,
    parse_fn,
    read_manifest,
    read_whole_file,
    record_batches,
    scan_file,
    whole_files,
)

__all__ = ["INTEGRITY_MODES", "TFRecordSource", "tfrecord"]

log = logging.getLogger(__name__)

INTEGRITY_MODES = ("strict", "tolerant", "off")


class TFRecordSource(FileSource):
    """TFRecord shards listed in a manifest (see `kdist.data.tfrecords`).

    All arguments are keyword-only.

    Args:
        manifest: the parsed manifest.
        integrity: `strict`: every file must have its manifest's size and record count,
            else reading fails naming the file; `tolerant`: every file is read once
            up front, corrupt or missing records are dropped and counted, and more than
            `max_dropped_fraction` of a split dropped fails naming the files; `off`:
            TensorFlow's own behaviour. Defaults to `"strict"`.
        max_dropped_fraction: the share of a split's records that `tolerant` may drop.
            Defaults to `0.01`.
        scale: multiply the features by this (as float32). Defaults to `None`: `uint8`
            becomes [0, 1] floats, other integers stay int32, floats float32.
        num_classes: overrides the manifest's class count. Defaults to `None`.
        splits: kdist split name -> the manifest's split name. Defaults to `None`:
            `{"train": "train", "validation": "validation"}`.
        key: the config key of the source, for messages. Defaults to `"data.source"`.
        label_key: the target feature(s): one name, or a list (a dict of targets by
            name, for a model with outputs of those names); integer or float features
            of any shape. Defaults to `None`: the manifest's `label_key`.
        weight_key: a scalar float feature of per-example sample weights. Defaults to
            `None`.
        whole_file_max_mb: in `strict` mode, files up to this many MiB whose manifest
            entry has a record length and a checksum are read whole
            (`read_whole_file`: faster; the 4 files being read and their parsed
            examples are in memory at once); larger files are read record by record.
            `0` reads every file record by record. Defaults to `32`.
    """

    def __init__(
        self,
        *,
        manifest: Manifest,
        integrity: str = "strict",
        max_dropped_fraction: float = 0.01,
        scale: float | None = None,
        num_classes: int | None = None,
        splits: dict[str, str] | None = None,
        key: str = "data.source",
        label_key: str | Sequence[str] | None = None,
        weight_key: str | None = None,
        whole_file_max_mb: float = 32.0,
    ):
        if integrity not in INTEGRITY_MODES:
            raise ConfigError(
                f"{key}.integrity",
                "is not a valid choice",
                value=integrity,
                hint=f"use one of: {', '.join(INTEGRITY_MODES)}",
            )
        if not 0.0 <= max_dropped_fraction < 1.0:
            raise ConfigError(
                f"{key}.max_dropped_fraction", "must be in [0, 1)", value=max_dropped_fraction
            )
        if not whole_file_max_mb >= 0:
            raise ConfigError(
                f"{key}.whole_file_max_mb",
                "must be at least 0 (0 reads every file record by record)",
                value=whole_file_max_mb,
            )
        self.manifest = manifest
        self.integrity = integrity
        self.whole_file_max_bytes = int(whole_file_max_mb * 1024 * 1024)
        self.scale = scale
        names = splits or {"train": "train", "validation": "validation"}
        if names["train"] not in manifest.splits:
            raise ConfigError(
                f"{key}.train_split",
                f"is not a split of {manifest.path}",
                value=names["train"],
                hint=f"splits there: {', '.join(sorted(manifest.splits))}",
            )
        self._shards = {split: manifest.splits.get(name, []) for split, name in names.items()}
        self._shard = {s.path: s for shards in self._shards.values() for s in shards}
        # Records each file must yield: the manifest's counts, or in tolerant mode what
        # could be read.
        self._counts = {s.path: s.records for shards in self._shards.values() for s in shards}
        self.dropped: dict[str, int] = {}
        if integrity == "strict":
            self._check_sizes()
        elif integrity == "tolerant":
            self._scan(float(max_dropped_fraction))
        spec = manifest.features[manifest.feature_key]
        self.input_shape = tuple(spec.shape)
        targets = (
            None
            if label_key is None
            else [label_key]
            if isinstance(label_key, str)
            else [str(k) for k in label_key]
        )
        for name, which in [*((t, "label_key") for t in targets or []), (weight_key, "weight_key")]:
            if name is not None and (
                name not in manifest.features or manifest.features[name].encoding != "list"
            ):
                numeric = [n for n, f in manifest.features.items() if f.encoding == "list"]
                raise ConfigError(
                    f"{key}.{which}",
                    f"is not a numeric feature of {manifest.path}",
                    value=name,
                    hint=f"numeric features there: {', '.join(sorted(numeric))}",
                )
        first = manifest.features[(targets or [manifest.label_key])[0]]
        classification = (targets is None or len(targets) == 1) and not tf.as_dtype(
            first.dtype
        ).is_floating
        if classification:
            self.num_classes = int(num_classes or manifest.num_classes or 0)
            if self.num_classes < 2:
                raise ConfigError(
                    f"{key}.num_classes",
                    f"is not in {manifest.path}; set it (at least 2)",
                    value=num_classes,
                )
        else:
            # Float or several targets: the size of the (first) target, as for arrays.
            self.num_classes = int(num_classes or (first.shape[-1] if first.shape else 1))
        self._parse = parse_fn(manifest, targets=targets, weight=weight_key)
        # `list` and `raw` features are parsed a batch of records at a time.
        self._batched = spec.encoding != "image"
        self._parse_batch = (
            parse_fn(manifest, batched=True, targets=targets, weight=weight_key)
            if self._batched
            else None
        )

    def _check_sizes(self) -> None:
        for shards in self._shards.values():
            for shard in shards:
                if not tf.io.gfile.exists(shard.path):
                    raise ConfigError(shard.path, f"is missing (listed in {self.manifest.path})")
                size = tf.io.gfile.stat(shard.path).length
                if shard.bytes is not None and size != shard.bytes:
                    raise ConfigError(
                        shard.path,
                        f"is {size} bytes but its manifest says {shard.bytes}: truncated or "
                        "changed",
                        hint="restore the file, or read what is left with "
                        "data.source.integrity=tolerant",
                    )

    def _scan(self, max_dropped_fraction: float) -> None:
        for split, shards in self._shards.items():
            expected = sum(s.records for s in shards)
            dropped = {}
            for shard in shards:
                readable = 0
                if tf.io.gfile.exists(shard.path):
                    readable = min(
                        scan_file(shard.path, self.manifest.compression)[0], shard.records
                    )
                if readable < shard.records:
                    dropped[shard.path] = shard.records - readable
                self._counts[shard.path] = readable
            lost = sum(dropped.values())
            self.dropped.update(dropped)
            if lost:
                shown = ", ".join(f"{path} ({n})" for path, n in sorted(dropped.items()))
                if lost > max_dropped_fraction * expected:
                    raise ConfigError(
                        shown,
                        f"{lost} of the {expected} {split} records are unreadable, more "
                        f"than data.source.max_dropped_fraction={max_dropped_fraction}",
                        hint="restore the files or raise the threshold",
                    )
                log.warning("dropped %d unreadable %s records: %s", lost, split, shown)

    def split_files(self, split: str) -> Sequence[str]:
        return [s.path for s in self._shards[split]]

    def size(self, split: str) -> int:
        return sum(self._counts[s.path] for s in self._shards[split])

    def count(self, split: str, files: Sequence[str]) -> int | None:
        return sum(self._counts[f] for f in files)

    def reads_whole(self, files: Sequence[str]) -> bool:
        """Whether `read` reads `files` whole (`read_whole_file`), not record by record.

        It does in `strict` mode, for `list` and `raw` features, when every file's
        manifest entry has a record length and a checksum and the file is at most
        `whole_file_max_mb`.
        """
        return (
            self.integrity == "strict"
            and self._parse_batch is not None
            and bool(files)
            and all(self._shard[f].readable_whole(self.whole_file_max_bytes) for f in files)
        )

    def read(self, split: str, files: Sequence[str]) -> tf.data.Dataset:
        """The examples of `files`, one by one, in a fixed order.

        With integrity checks (`strict`, `tolerant`) the files are read four at a time,
        `READ_BATCH` consecutive records of each in turn: whole when `reads_whole`
        (`read_whole_file`: one read and checksum per file, parsed at once), else as
        `record_batches` gives them (TensorFlow's reader, record by record). `list` and
        `raw` features are then checked, parsed (`tf.io.parse_example`) and converted
        many records at a time, in one function, and unbatched once; image features are
        decoded one record at a time. Examples come out singly, so shuffling, sharding
        and a resumed run's skip stay per example. With `integrity=off` the files are
        read one after the other.
        """
        compression = self.manifest.compression
        # Files that tolerant mode found empty or missing are skipped.
        files = [f for f in files if self._counts[f] > 0]
        auto = tf.data.AUTOTUNE
        if self.reads_whole(files):

            def file_examples(*file: tf.Tensor) -> tuple[Any, ...]:
                # Read, checked and parsed in one function: one instantiation per pass.
                return self._examples(read_whole_file(*file))

            whole = whole_files([self._shard[f] for f in files])
            parsed = whole.map(file_examples, num_parallel_calls=auto, deterministic=True)
            return interleave_files(parsed)
        if self.integrity == "off":
            records = tf.data.TFRecordDataset(list(files), compression_type=compression or "")
            if self._parse_batch is None:
                return records.map(self._example, num_parallel_calls=auto, deterministic=True)
            batches = records.batch(READ_BATCH)
            return batches.map(
                self._examples, num_parallel_calls=auto, deterministic=True
            ).unbatch()
        batches = record_batches(
            list(files), [self._counts[f] for f in files], compression=compression
        )
        if self._parse_batch is None:
            checked = batches.map(check_batch, num_parallel_calls=auto, deterministic=True)
            return checked.unbatch().map(self._example, num_parallel_calls=auto, deterministic=True)

        def checked_examples(records: tf.Tensor, first: tf.Tensor, file: Any) -> Any:
            # The count check and the parse in one function: TensorFlow instantiates
            # each function of a pipeline again on every pass over the data.
            return self._examples(check_batch(records, first, file))

        parsed = batches.map(checked_examples, num_parallel_calls=auto, deterministic=True)
        return parsed.unbatch()

    def _examples(self, records: tf.Tensor) -> tuple[Any, ...]:
        """A batch of `(features, target[, weight])` from a vector of records."""
        assert self._parse_batch is not None
        x, *rest = self._parse_batch(records)
        return (model_tensor(x, self.scale), *rest)

    def _example(self, record: tf.Tensor) -> tuple[Any, ...]:
        """One `(features, target[, weight])` from a record."""
        x, *rest = self._parse(record)
        return (model_tensor(x, self.scale), *rest)


def tfrecord(
    *,
    path: str,
    integrity: str = "strict",
    max_dropped_fraction: float = 0.01,
    scale: float | None = None,
    num_classes: int | None = None,
    train_split: str = "train",
    validation_split: str = "validation",
    label_key: str | Sequence[str] | None = None,
    weight_key: str | None = None,
    whole_file_max_mb: float = 32.0,
) -> TFRecordSource:
    """TFRecord shards with a kdist manifest (`kdist.data.tfrecords.write_tfrecords`).

    Args:
        path: the folder holding `manifest.json`, or the manifest file itself.
        integrity: `strict`, `tolerant` or `off` (see `TFRecordSource`).
            Defaults to `"strict"`.
        max_dropped_fraction: the share of records `tolerant` may drop. Defaults to `0.01`.
        scale: multiply the features by this. Defaults to `None` (see `TFRecordSource`).
        num_classes: overrides the manifest's class count. Defaults to `None`.
        train_split: the manifest's training split. Defaults to `"train"`.
        validation_split: the manifest's validation split (may be absent: no validation).
            Defaults to `"validation"`.
        label_key: the target feature(s), a name or a list (see `TFRecordSource`).
            Defaults to `None`: the manifest's.
        weight_key: a feature of per-example sample weights. Defaults to `None`.
        whole_file_max_mb: files up to this size are read whole when they can be (see
            `TFRecordSource`); `0` reads record by record. Defaults to `32`.

    Returns:
        A `TFRecordSource`.

    Raises:
        ConfigError: naming `data.source.path` when there is no manifest, or a file that
            is missing, truncated or (in tolerant mode) too damaged.
    """
    found = existing_path("data.source.path", path, kind="any")
    manifest_path = os.path.join(found, MANIFEST_NAME) if tf.io.gfile.isdir(found) else found
    if not tf.io.gfile.exists(manifest_path):
        raise ConfigError(
            "data.source.path",
            f"has no {MANIFEST_NAME}",
            value=path,
            hint="write the files with kdist.data.tfrecords.write_tfrecords, or describe "
            "existing ones with kdist.data.tfrecords.write_manifest",
        )
    return TFRecordSource(
        manifest=read_manifest(manifest_path),
        integrity=integrity,
        max_dropped_fraction=max_dropped_fraction,
        scale=scale,
        num_classes=num_classes,
        splits={"train": train_split, "validation": validation_split},
        label_key=label_key,
        weight_key=weight_key,
        whole_file_max_mb=whole_file_max_mb,
    )
