"""Deprecated path: the TFRecord writer and readers live in `kdist.data.tfrecords`.

This module re-exports `kdist.data.tfrecords`'s names for one release, so scripts that
import `kdist.data.tfrecord_io` keep working; import `kdist.data.tfrecords` instead.
"""

from kdist.data.tfrecords import (
    FINGERPRINT_MAX_BYTES,
    MANIFEST_NAME,
    READ_BATCH,
    FeatureSpec,
    Manifest,
    Shard,
    check_batch,
    checked_records,
    interleave_files,
    parse_fn,
    read_manifest,
    read_whole_file,
    record_batches,
    scan_file,
    whole_file_entry,
    whole_files,
    write_manifest,
    write_tfrecords,
)

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
