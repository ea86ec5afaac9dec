"""Data sources (`_target_` in `conf/data/*.yaml`) and the input pipeline builder.

Only what users call is exported here: the source functions a config names, the `Source`
base class for custom sources, the TFRecord writers and `make_dataset_fn`. The classes
behind each source live in the module named after it (`kdist.data.csv_source`, ...);
kdist's own modules import from those submodules.
"""

from kdist.data.builtin import digits, synthetic
from kdist.data.csv_source import csv
from kdist.data.image_dir_source import image_dir
from kdist.data.keras_datasets import keras_dataset
from kdist.data.npz_source import npz
from kdist.data.pipeline import make_dataset_fn
from kdist.data.source import ArraySource, Source
from kdist.data.synthetic_text_source import synthetic_text
from kdist.data.tfds_source import tfds
from kdist.data.tfrecord_source import tfrecord
from kdist.data.tfrecords import write_manifest, write_tfrecords

__all__ = [
    "ArraySource",
    "Source",
    "csv",
    "digits",
    "image_dir",
    "keras_dataset",
    "make_dataset_fn",
    "npz",
    "synthetic",
    "synthetic_text",
    "tfds",
    "tfrecord",
    "write_manifest",
    "write_tfrecords",
]
