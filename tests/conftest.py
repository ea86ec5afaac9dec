"""Shared fixtures; helpers live in `helpers.py`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_configure(config):
    """Split the CPU into 2 logical devices before any test touches TensorFlow."""
    import importlib

    # Before TensorFlow starts: its start-up lines off, as the kdist commands do
    # (`import kdist` alone changes nothing in the process).
    importlib.import_module("kdist").quiet_tensorflow(2)
    tf = importlib.import_module("tensorflow")

    (cpu,) = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


SLOW_CASES = Path(__file__).with_name("slow_cases.txt")


def _slow_cases() -> set[str]:
    lines = SLOW_CASES.read_text().splitlines()
    return {line.split("#", 1)[0].strip() for line in lines} - {""}


def pytest_collection_modifyitems(config, items):
    """Mark the heavy cases of `slow_cases.txt` `slow` (`make test` leaves them out)."""
    listed = _slow_cases()
    found = set()
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
            found.add(item.nodeid)
    collected_files = {item.nodeid.split("::", 1)[0] for item in items}
    missing = sorted(
        nodeid
        for nodeid in listed - found
        if nodeid.split("::", 1)[0] in collected_files
        and "::" in nodeid
        # a run of a few tests (-k, a node id) collects only part of a file
        and not config.getoption("keyword")
        and not any("::" in arg for arg in config.args)
    )
    if missing:
        message = (
            f"{SLOW_CASES.name} lists cases that no longer exist: {', '.join(missing)}; "
            "update the file"
        )
        # Written here too: `pytest_unconfigure` ends the process before pytest prints a
        # usage error raised during collection (a run said only "no tests ran", status 4).
        sys.stderr.write(f"ERROR: {message}\n")
        raise pytest.UsageError(message)


@pytest.fixture
def tiny(tmp_path: Path) -> list[str]:
    """Overrides for a fast in-process job writing under tmp_path."""
    return [
        "trainer=fast_dev",
        "trainer.verbose=0",
        f"run_dir={tmp_path / 'run'}",
    ]


_EXIT: dict[str, int] = {}


def pytest_sessionfinish(session, exitstatus):
    _EXIT["status"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the process once pytest has reported, without Python's finalization.

    A fresh clone's `make test` printed its summary (all passed) and then hung: the
    interpreter's exit destroyed a tf.data iterator left by a test, whose destructor waits
    for an input thread that can no longer run Python (TensorFlow logs "Error occurred when
    finalizing GeneratorDataset iterator: Python interpreter state is not initialized").
    The tests' results are already written; `os._exit` keeps the status.
    """
    if "status" not in _EXIT:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_EXIT["status"])
