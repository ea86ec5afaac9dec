"""Data sources (`_target_` in `conf/data/*.yaml`) and the input pipeline builder."""

from kdist.data.builtin import digits, synthetic
from kdist.data.pipeline import DatasetFn, make_dataset_fn, steps_per_epoch
from kdist.data.source import ArraySource, Source

__all__ = [
    "ArraySource",
    "DatasetFn",
    "Source",
    "digits",
    "make_dataset_fn",
    "steps_per_epoch",
    "synthetic",
]
