"""Data sources (`_target_` in `conf/data/*.yaml`) and the input pipeline builder."""

from kdist.data.builtin import digits, synthetic
from kdist.data.csv import CsvSource, csv
from kdist.data.files import FileSource
from kdist.data.image_dir import ImageDirSource, image_dir
from kdist.data.keras_datasets import keras_dataset
from kdist.data.npz import npz
from kdist.data.pipeline import DatasetFn, make_dataset_fn, resolve_shard_policy, steps_per_epoch
from kdist.data.source import ArraySource, Source
from kdist.data.synthetic_text import TokenSource, synthetic_text
from kdist.data.tfds import TfdsSource, tfds
from kdist.data.tfrecord import TFRecordSource, tfrecord
from kdist.data.tfrecord_io import write_manifest, write_tfrecords

__all__ = [
    "ArraySource",
    "CsvSource",
    "DatasetFn",
    "FileSource",
    "ImageDirSource",
    "Source",
    "TFRecordSource",
    "TfdsSource",
    "TokenSource",
    "csv",
    "digits",
    "image_dir",
    "keras_dataset",
    "make_dataset_fn",
    "npz",
    "resolve_shard_policy",
    "steps_per_epoch",
    "synthetic",
    "synthetic_text",
    "tfds",
    "tfrecord",
    "write_manifest",
    "write_tfrecords",
]
