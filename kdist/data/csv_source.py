"""The `csv` source: numeric feature columns and a label column in CSV files with a header."""

from __future__ import annotations

import csv as csv_module
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from kdist.config.errors import ConfigError
from kdist.data.files import FileSource, expand_files

__all__ = ["CsvSource", "csv"]

_BUCKETS = 1_000_000


@dataclass(frozen=True)
class _Layout:
    header: list[str]
    features: list[str]
    label: str
    delimiter: str
    # `values`: float targets in `label` and `extra_targets` (regression); else class ids.
    values: bool = False
    extra_targets: tuple[str, ...] = ()
    weight: str | None = None

    @property
    def targets(self) -> list[str]:
        return [self.label, *self.extra_targets]

    @property
    def numeric(self) -> list[str]:
        """Columns that must hold numbers: features, float targets, the weight."""
        return [
            *self.features,
            *(self.targets if self.values else []),
            *([self.weight] if self.weight else []),
        ]


def _scan(key: str, files: Sequence[str], layout: _Layout) -> tuple[dict[str, int], set[str]]:
    """Row counts per file and the label values; checks every row once, in Python."""
    counts: dict[str, int] = {}
    labels: set[str] = set()
    columns = [layout.header.index(name) for name in layout.numeric]
    label_index = layout.header.index(layout.label)
    for file in files:
        with tf.io.gfile.GFile(file, "r") as handle:
            reader = csv_module.reader(handle, delimiter=layout.delimiter)
            header = next(reader, None)
            if header is None or [h.strip() for h in header] != layout.header:
                raise ConfigError(
                    key, f"{file} has the header {header}, not {layout.header}", value=file
                )
            rows = 0
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(layout.header):
                    raise ConfigError(
                        f"{file}:{line}", f"has {len(row)} fields, the header {len(layout.header)}"
                    )
                for index in columns:
                    try:
                        float(row[index])
                    except ValueError:
                        raise ConfigError(
                            f"{file}:{line}",
                            f"column {layout.header[index]!r} is not a number",
                            value=row[index],
                        ) from None
                if not layout.values:
                    labels.add(row[label_index].strip())
                rows += 1
            counts[file] = rows
    return counts, labels


def _validation_mask(
    name: tf.Tensor | str, rows: tf.Tensor, fraction: float, seed: int
) -> tf.Tensor:
    """Whether each row (index within its file) is held out: a fixed hash of file and row."""
    keys = tf.strings.join([name, ":", tf.strings.as_string(rows), ":", str(seed)])
    return tf.strings.to_hash_bucket_fast(keys, _BUCKETS) < round(fraction * _BUCKETS)


class CsvSource(FileSource):
    """Rows of CSV files, read with `tf.data.experimental.CsvDataset`.

    Build it with `kdist.data.csv`; the constructor takes the checked layout.
    """

    def __init__(
        self,
        *,
        files: dict[str, list[str]],
        row_counts: dict[str, int],
        layout: _Layout,
        vocabulary: list[str] | None,
        num_classes: int,
        validation_fraction: float | None,
        split_seed: int,
    ):
        self._files = files
        self._layout = layout
        self._vocabulary = vocabulary
        self._fraction = validation_fraction
        self._seed = split_seed
        self.input_shape = (len(layout.features),)
        self.num_classes = num_classes
        self.class_names = vocabulary
        self._counts: dict[tuple[str, str], int] = {}
        for split, split_files in files.items():
            for file in split_files:
                self._counts[(split, file)] = self._split_rows(split, file, row_counts[file])

    def _split_rows(self, split: str, file: str, rows: int) -> int:
        if self._fraction is None:
            return rows
        held = _validation_mask(
            os.path.basename(file), tf.range(rows, dtype=tf.int64), self._fraction, self._seed
        )
        count = int(tf.reduce_sum(tf.cast(held, tf.int64)))
        return count if split == "validation" else rows - count

    def split_files(self, split: str) -> Sequence[str]:
        return self._files[split]

    def size(self, split: str) -> int:
        return sum(self._counts[(split, f)] for f in self._files[split])

    def count(self, split: str, files: Sequence[str]) -> int | None:
        return sum(self._counts[(split, f)] for f in files)

    def read(self, split: str, files: Sequence[str]) -> tf.data.Dataset:
        layout = self._layout
        used = [*layout.features, *layout.targets, *([layout.weight] if layout.weight else [])]
        wanted = sorted({layout.header.index(n) for n in used})
        position = {index: i for i, index in enumerate(wanted)}
        feature_positions = [position[layout.header.index(n)] for n in layout.features]
        label_position = position[layout.header.index(layout.label)]
        target_positions = [position[layout.header.index(n)] for n in layout.targets]
        weight_position = position[layout.header.index(layout.weight)] if layout.weight else None
        defaults = [
            tf.constant([], tf.string)
            if i == label_position and not layout.values
            else tf.constant([], tf.float32)
            for i in range(len(wanted))
        ]
        vocabulary = self._vocabulary
        fraction, seed, keep_validation = self._fraction, self._seed, split == "validation"

        def label_id(text: tf.Tensor) -> tf.Tensor:
            text = tf.strings.strip(text)
            if vocabulary is None:
                return tf.strings.to_number(text, tf.int32)
            matches = tf.cast(tf.equal(tf.constant(vocabulary), text), tf.int32)
            return tf.cast(tf.argmax(matches), tf.int32)

        def rows_of(path: tf.Tensor, name: tf.Tensor) -> tf.data.Dataset:
            rows = tf.data.experimental.CsvDataset(
                path,
                defaults,
                header=True,
                field_delim=layout.delimiter,
                select_cols=wanted,
            ).enumerate()
            if fraction is not None:
                rows = rows.filter(
                    lambda index, values: tf.equal(
                        _validation_mask(name, index, fraction, seed), keep_validation
                    )
                )
            return rows

        def example(index: tf.Tensor, values: tuple[tf.Tensor, ...]) -> tuple[Any, ...]:
            x = tf.stack([values[i] for i in feature_positions])
            y: Any
            if not layout.values:
                y = label_id(values[label_position])
            elif layout.extra_targets:
                y = {
                    n: values[i][None]
                    for n, i in zip(layout.targets, target_positions, strict=True)
                }
            else:
                y = values[label_position][None]
            if weight_position is None:
                return x, y
            return x, y, values[weight_position]

        names = [os.path.basename(f) for f in files]
        paths = tf.data.Dataset.from_tensor_slices(
            (tf.constant(list(files), tf.string), tf.constant(names, tf.string))
        )
        return paths.flat_map(rows_of).map(
            example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )


def _layout(
    key: str,
    file: str,
    label: str | Sequence[str],
    features: Sequence[str] | None,
    delimiter: str,
    *,
    values: bool = False,
    weight: str | None = None,
) -> _Layout:
    with tf.io.gfile.GFile(file, "r") as handle:
        header = next(csv_module.reader(handle, delimiter=delimiter), None)
    if not header:
        raise ConfigError(key, f"{file} is empty; it needs a header row", value=file)
    header = [h.strip() for h in header]
    targets = [label] if isinstance(label, str) else [str(n) for n in label]
    if not targets:
        raise ConfigError("data.source.label_column", "must name a column")
    if len(targets) > 1 and not values:
        raise ConfigError(
            "data.source.label_column",
            "names several columns: that needs float targets",
            value=list(targets),
            hint="set data.source.targets=value, or name one class column",
        )
    for name, key_name in [(n, "data.source.label_column") for n in targets] + (
        [(weight, "data.source.weight_column")] if weight else []
    ):
        if name not in header:
            raise ConfigError(
                key_name,
                f"is not a column of {file}",
                value=name,
                hint=f"columns: {', '.join(header)}",
            )
    taken = {*targets, *([weight] if weight else [])}
    chosen = list(features) if features else [h for h in header if h not in taken]
    unknown = [name for name in chosen if name not in header]
    if unknown:
        raise ConfigError(
            "data.source.feature_columns",
            f"{unknown[0]!r} is not a column of {file}",
            hint=f"columns: {', '.join(header)}",
        )
    if not chosen or taken & set(chosen):
        raise ConfigError(
            "data.source.feature_columns",
            "must name one or more columns besides the targets and the weight",
        )
    return _Layout(
        header=header,
        features=chosen,
        label=targets[0],
        delimiter=delimiter,
        values=values,
        extra_targets=tuple(targets[1:]),
        weight=weight,
    )


def csv(
    *,
    path: str | Sequence[str],
    validation_path: str | Sequence[str] | None = None,
    label_column: str | Sequence[str] = "label",
    feature_columns: Sequence[str] | None = None,
    validation_fraction: float = 0.2,
    split_seed: int = 0,
    num_classes: int | None = None,
    delimiter: str = ",",
    targets: str = "class",
    weight_column: str | None = None,
) -> CsvSource:
    """Numeric features and a target from CSV files with a header row.

    With `targets: class`, the label is an integer class id or any text (classes are
    then the sorted distinct values). With `targets: value`, the label column(s) hold
    float regression targets: one column gives a target of shape `(1,)`, several give a
    dict keyed by column name (a model with outputs of those names). A `weight_column`
    gives each row a sample weight. Every file is checked once, in Python, before
    training: a row with a wrong field count or a non-numeric feature, target or weight
    fails naming the file and line.

    Args:
        path: a training file, a glob pattern or a list of them (one file per shard).
        validation_path: the validation file(s). Defaults to `None`: a fixed
            `validation_fraction` of the rows, chosen by a hash of file name and row.
        label_column: the label's column name. Defaults to `"label"`.
        feature_columns: the features' column names, in model order. Defaults to `None`:
            every column but the label.
        validation_fraction: share held out without `validation_path`. Defaults to `0.2`.
        split_seed: seed of that split. Defaults to `0`.
        num_classes: number of classes. Defaults to `None`: from the labels.
        delimiter: the field separator. Defaults to `","`.
        targets: `class` or `value` (float targets). Defaults to `"class"`.
        weight_column: a column of per-row sample weights. Defaults to `None`.

    Returns:
        A `CsvSource` (sharded by file under `data.shard_policy=file`).

    Raises:
        ConfigError: naming the key, file or line at fault.
    """
    if len(delimiter) != 1:
        raise ConfigError("data.source.delimiter", "must be one character", value=delimiter)
    if targets not in ("class", "value"):
        raise ConfigError(
            "data.source.targets", "is not a valid choice", value=targets, hint="class or value"
        )
    train_files = expand_files("data.source.path", path)
    layout = _layout(
        "data.source.path",
        train_files[0],
        label_column,
        feature_columns,
        delimiter,
        values=targets == "value",
        weight=weight_column,
    )
    val_files = (
        expand_files("data.source.validation_path", validation_path) if validation_path else []
    )
    counts, labels = _scan("data.source.path", train_files, layout)
    if not sum(counts.values()):
        # Before the label check, which would call no rows "fewer than 2 classes".
        shown = ", ".join(train_files[:3]) + (" ..." if len(train_files) > 3 else "")
        raise ConfigError(
            "data.source.path",
            f"has a header but no data rows ({shown})",
            value=str(path),
            hint="give a CSV file with at least one row after the header",
        )
    if val_files:
        val_counts, val_labels = _scan("data.source.validation_path", val_files, layout)
        counts.update(val_counts)
        labels |= val_labels
    vocabulary: list[str] | None = None
    if layout.values:
        classes = len(layout.targets)
    else:
        vocabulary, classes = _classes(labels, num_classes)
    if not val_files and not 0.0 <= validation_fraction < 1.0:
        raise ConfigError(
            "data.source.validation_fraction", "must be in [0, 1)", value=validation_fraction
        )
    source = CsvSource(
        files={"train": train_files, "validation": val_files or train_files},
        row_counts=counts,
        layout=layout,
        vocabulary=vocabulary,
        num_classes=classes,
        validation_fraction=None if val_files else float(validation_fraction),
        split_seed=split_seed,
    )
    if source.size("train") < 1:
        raise ConfigError("data.source.path", "has no training rows", value=str(path))
    return source


def _classes(labels: set[str], num_classes: int | None) -> tuple[list[str] | None, int]:
    """The class vocabulary (`None` for integer ids) and the class count."""
    vocabulary: list[str] | None
    try:
        ids = sorted({int(v) for v in labels})
        vocabulary = None
        if ids and ids[0] < 0:
            raise ConfigError("data.source.label_column", "has a negative class id", value=ids[0])
        classes = int(num_classes or (ids[-1] + 1 if ids else 0))
        if ids and ids[-1] >= classes:
            raise ConfigError(
                "data.source.num_classes",
                f"is too small for the label {ids[-1]}",
                value=num_classes,
            )
    except ValueError as error:
        if isinstance(error, ConfigError):
            raise
        vocabulary = sorted(labels)
        classes = int(num_classes or len(vocabulary))
        if classes != len(vocabulary):
            raise ConfigError(
                "data.source.num_classes",
                f"does not match the {len(vocabulary)} label values {vocabulary[:5]}",
                value=num_classes,
            ) from None
    if classes < 2:
        raise ConfigError(
            "data.source.label_column",
            "has fewer than 2 classes",
            hint="for float targets set data.source.targets=value",
        )
    return vocabulary, classes
