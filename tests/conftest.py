"""Shared fixtures; helpers live in `helpers.py`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_configure(config):
    """Split the CPU into 2 logical devices before any test touches TensorFlow."""
    import importlib

    # kdist first: importing it quiets TensorFlow's start-up lines.
    importlib.import_module("kdist")
    tf = importlib.import_module("tensorflow")

    (cpu,) = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


@pytest.fixture
def tiny(tmp_path: Path) -> list[str]:
    """Overrides for a fast in-process job writing under tmp_path."""
    return [
        "trainer=fast_dev",
        "trainer.verbose=0",
        f"run_dir={tmp_path / 'run'}",
    ]
