"""Keras's own tests as the judge (issue 50): `suite.py` run from pytest.

Runs Keras's test files (`suite.FILES`, from the installed Keras's source distribution,
downloaded once into `~/.cache/kdist/keras-sdist`) as Keras ships them and routed through
kdist under `one_device`, and checks that no test routed through kdist in the committed
report (`benchmarks/results/keras-suite.json`) fails now. Skipped, with the reason, when
the source distribution cannot be downloaded. Cost: ~15-40 min on 2 cores (`slow`); the
callback test files alone, in `make test`, a few minutes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite


def _no_regression(tmp_path, files: list[str]) -> None:
    """Run `files` as Keras ships them and routed through kdist (one_device); fail for a
    test that passed routed in the committed report and fails now."""
    version = suite.keras_version()
    try:
        archive = suite.sdist(version)
    except suite.Unavailable as error:
        pytest.skip(f"Keras's source distribution cannot be had: {error}")
    work = suite.unpack(archive, version, files)
    baseline = suite.run(work, files, route="", out=tmp_path / "baseline.json")
    routed = suite.run(work, files, route="one_device", out=tmp_path / "routed.json")
    comparison = suite.compare(baseline, routed)
    assert comparison["total"].get("pass on keras", 0) > 0, "Keras's own tests did not run"
    committed = json.loads((suite.RESULTS / "keras-suite.json").read_text())
    failing_now = set(comparison["failures"])
    passed_then = set(committed["comparison"]["passes"])
    regressions = sorted(passed_then & failing_now)
    assert not regressions, "routed through kdist, these passed before: " + ", ".join(
        f"{nodeid} ({comparison['failures'][nodeid]})" for nodeid in regressions
    )


def test_keras_tests_routed_through_kdist_pass_as_in_the_report(tmp_path):
    _no_regression(tmp_path, suite.FILES)


def test_keras_callback_tests_routed_through_kdist_pass_as_in_the_report(tmp_path):
    # The fast part, in `make test`: the tests of Keras's callback files that pass routed
    # in the committed report, run routed only (Keras's own run is the report's).
    version = suite.keras_version()
    try:
        archive = suite.sdist(version)
    except suite.Unavailable as error:
        pytest.skip(f"Keras's source distribution cannot be had: {error}")
    files = [f for f in suite.FILES if f.startswith("callbacks/")]
    work = suite.unpack(archive, version, files)
    committed = json.loads((suite.RESULTS / "keras-suite.json").read_text())
    passed = [n for n in committed["comparison"]["passes"] if n.startswith("callbacks/")]
    assert passed, "the committed report has no routed pass in Keras's callback tests"
    routed = suite.run(work, passed, route="one_device", out=tmp_path / "routed.json")
    failing = {
        nodeid: routed.get(nodeid, {}).get("message", "not run")
        for nodeid in passed
        if routed.get(nodeid, {}).get("outcome") != "passed"
    }
    assert not failing, f"routed through kdist, these passed before: {failing}"
