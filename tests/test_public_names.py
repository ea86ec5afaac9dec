"""What `kdist.data` and `kdist.models` export, and that each name means one thing."""

from __future__ import annotations

import importlib
import inspect

import pytest
from hydra.utils import get_method

import kdist

DATA_EXPORTS = {
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
}
MODEL_EXPORTS = {"build", "cnn", "from_config", "mlp", "resnet", "transformer", "wide_deep"}
# Source function -> the module that defines it (named after the source, not the same name).
SOURCES = {
    "csv": "kdist.data.csv_source",
    "npz": "kdist.data.npz_source",
    "tfrecord": "kdist.data.tfrecord_source",
    "tfds": "kdist.data.tfds_source",
    "image_dir": "kdist.data.image_dir_source",
    "synthetic_text": "kdist.data.synthetic_text_source",
}
MODELS = {
    "mlp": "kdist.models.mlp",
    "cnn": "kdist.models.cnn",
    "wide_deep": "kdist.models.wide_deep",
}


def test_kdist_data_exports_what_users_call():
    assert set(kdist.data.__all__) == DATA_EXPORTS
    assert all(hasattr(kdist.data, name) for name in DATA_EXPORTS)


def test_kdist_models_exports_every_builtin_model_and_the_factory():
    assert set(kdist.models.__all__) == MODEL_EXPORTS
    assert all(callable(getattr(kdist.models, name)) for name in MODEL_EXPORTS)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_data_source_name_is_the_function_and_its_target_resolves(name):
    function = getattr(kdist.data, name)
    assert inspect.isfunction(function)
    assert function.__module__ == SOURCES[name]
    assert importlib.import_module(SOURCES[name]).__dict__[name] is function
    assert get_method(f"kdist.data.{name}") is function


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_model_module_is_named_after_the_model_it_defines(name):
    function = getattr(kdist.models, name)
    assert function.__module__ == MODELS[name]
    assert get_method(f"kdist.models.{name}") is function
