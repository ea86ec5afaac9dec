"""TFRecord files with a record-count manifest: writing them, and reading them with checks.

The package is named for the files; `kdist.data.tfrecord` is the source function a config
names (`kdist.data.tfrecord_source`). One module per job: `manifest` (the format the
writer and the readers share), `writer`, `readers` (record by record, or a file whole),
`checks` (every file against its manifest's count) and `parsing`.

Example:

```python
from kdist.data.tfrecords import write_tfrecords

write_tfrecords("data/digits", {"train": (x_train, y_train), "validation": (x_val, y_val)},
                num_shards={"train": 3, "validation": 1})
# then: python -m kdist.train data=tfrecord data.source.path=data/digits
```
"""

from kdist.data.tfrecords.checks import check_batch, checked_records, scan_file
from kdist.data.tfrecords.manifest import (
    FINGERPRINT_MAX_BYTES,
    MANIFEST_NAME,
    FeatureSpec,
    Manifest,
    Shard,
    read_manifest,
    whole_file_entry,
)
from kdist.data.tfrecords.parsing import parse_fn
from kdist.data.tfrecords.readers import (
    READ_BATCH,
    interleave_files,
    read_whole_file,
    record_batches,
    whole_files,
)
from kdist.data.tfrecords.writer import write_manifest, write_tfrecords

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
