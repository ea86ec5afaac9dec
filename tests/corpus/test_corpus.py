"""The corpus: keras.io-style programs trained by `model.fit` and by kdist (tests/corpus/README.md).

For each program: kdist under one_device equals `model.fit` (weights within 1e-5, or the
loss per epoch within the program's stated tolerance; `evaluate`/`predict` too where the
program uses them; and the callback trace), and kdist under mirrored (2 logical CPUs) equals
Keras's own `fit` under `MirroredStrategy` (weights within 1e-5 and the trace) wherever Keras
can run the program there; where it cannot (`KERAS_MIRRORED_FAILS`, checked), kdist trains
with finite logs; where kdist refuses it on purpose (`KDIST_MIRRORED_REFUSAL`), the refusal
is one line.
The fast suite runs a handful; the rest are in tests/slow_cases.txt. A session's summary
prints the pass rate (conftest.py).
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import harness
import pytest

PROGRAMS = harness.program_names()
# Programs compared by their weights (the others state a loss tolerance, or check by hand).
BY_WEIGHTS = [n for n in PROGRAMS if getattr(harness.load(n), "COMPARE", "weights") == "weights"]


@pytest.mark.parametrize("name", PROGRAMS)
def test_equals_fit_under_one_device(name: str, tmp_path: Path):
    program = harness.load(name)

    def run() -> str:
        with harness.program_warnings(program):
            reference = harness.run_keras(program, tmp_path / "keras")
            ours = harness.run_kdist(program, tmp_path / "kdist", "one_device")
            return harness.compare(program, reference, ours)

    harness.record(name, "one_device", run)


@pytest.mark.parametrize("name", PROGRAMS)
def test_under_mirrored(name: str, tmp_path: Path):
    """Under mirrored the judge is Keras itself: its `fit` inside `MirroredStrategy` over the
    same 2 logical CPUs. Where Keras cannot run the program there (the program says why in
    `KERAS_MIRRORED_FAILS`, and this checks that Keras still fails), kdist must train;
    where kdist refuses it on purpose, the refusal must be its one line."""
    program = harness.load(name)
    refusal = getattr(program, "KDIST_MIRRORED_REFUSAL", None)
    keras_fails = getattr(program, "KERAS_MIRRORED_FAILS", None)
    custom = hasattr(program, "run_keras")
    harness.MIRRORED_JUDGE[name] = (
        "refusal" if refusal else "trains" if keras_fails or custom else "keras"
    )

    def run() -> str:
        with harness.program_warnings(program):
            if refusal:
                return _refused(program, tmp_path, refusal)
            if keras_fails or custom:
                why = _keras_still_fails(program, tmp_path / "keras") if keras_fails else "a search"
                ours = harness.run_kdist(program, tmp_path / "kdist", "mirrored")
                return f"trains: {harness.check_trains(program, ours)}; Keras's fit: {why}"
            try:
                reference = harness.run_keras(
                    program, tmp_path / "keras", harness.mirrored_strategy()
                )
            except Exception as error:
                raise AssertionError(
                    f"Keras's own fit under MirroredStrategy raised "
                    f"{harness.one_line(error)}: if Keras cannot run this program there, "
                    f"say why in the program's KERAS_MIRRORED_FAILS"
                ) from error
            ours = harness.run_kdist(program, tmp_path / "kdist", "mirrored")
            return harness.compare(program, reference, ours, who="Keras's mirrored fit")

    harness.record(name, "mirrored", run)


def _keras_still_fails(program, tmp_path: Path) -> str:
    try:
        harness.run_keras(program, tmp_path, harness.mirrored_strategy())
    except Exception as error:
        return harness.one_line(error)[:120]
    raise AssertionError(
        "Keras's own fit now runs this program under MirroredStrategy: drop "
        "KERAS_MIRRORED_FAILS so that kdist is compared with it"
    )


def _refused(program, tmp_path: Path, pattern: str) -> str:
    import kdist

    try:
        harness.run_kdist(program, tmp_path / "kdist", "mirrored")
    except kdist.ConfigError as error:
        text = str(error)
        assert "\n" not in text.strip(), f"the refusal is not one line: {text!r}"
        assert re.search(pattern, text), f"refused with {text!r}, not /{pattern}/"
        return f"refused in one line: {text[:120]}"
    raise AssertionError(f"kdist trained it under mirrored; it was to refuse it (/{pattern}/)")


@pytest.mark.parametrize("name", BY_WEIGHTS)
def test_the_reference_is_reproducible(name: str, tmp_path: Path):
    """The judge itself: `model.fit` twice gives the same weights (so a difference is
    kdist's), and training moved them (so equal weights are not two untrained models)."""
    program = harness.load(name)
    with harness.program_warnings(program):
        first = harness.run_keras(program, tmp_path / "first")
        second = harness.run_keras(program, tmp_path / "second")
        initial = program.make_model()
    assert harness.max_weight_diff(first.model, second.model) == 0.0
    if initial.built and len(initial.get_weights()) == len(first.model.get_weights()):
        assert harness.max_weight_diff(first.model, initial) > 1e-3


def test_a_generator_under_parameter_server_is_refused_in_one_line(tmp_path: Path, monkeypatch):
    """A Python generator runs in the chief's process; parameter-server workers build their
    own pipelines: kdist refuses it before training, in one line naming `x`."""
    from kdist.launch import run

    corpus = str(Path(__file__).parent)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [corpus, os.environ.get("PYTHONPATH")]))
    )
    log = io.StringIO()
    code = run(
        2,
        ["strategy=parameter_server", "callbacks=minimal", "trainer.verbose=0"],
        ps=1,
        module="ps_generator",
        run_dir=tmp_path / "run",
        timeout=240,
        output=log,
    )
    text = log.getvalue()
    lines = [line for line in text.splitlines() if "REFUSED" in line]
    assert code == 0, text[-3000:]
    assert len(lines) == 1, text[-3000:]
    message = lines[0].split("REFUSED ", 1)[1]
    assert message.startswith(("x: ", "x=")) and "\\n" not in message, message
    assert "Traceback" not in text
    assert "TRAINED" not in text
