"""recipes/notebooks run top to bottom in a real Jupyter kernel, clean, and show a plot.

Cost: ~20 s (quickstart); slow: the quickstart under `strategy=auto` (~10 s), the
multi-worker notebook (~25 s, two worker processes on the notebook's arrays) and the
parameter-server notebook (~20 s, a chief, two workers and a ps).
"""

from __future__ import annotations

import ast
import base64
import json
import os
import re
from pathlib import Path

import pytest
from helpers import REPO

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = REPO / "recipes" / "notebooks"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _execute(name: str, cwd: Path, timeout: int, edits: dict[str, str] | None = None) -> object:
    """Run notebook `name` in a fresh kernel in `cwd`, after replacing each key of `edits`
    (a piece of one code cell's source) with its value, as a user edits a cell."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    for old, new in (edits or {}).items():
        (cell,) = [c for c in notebook.cells if c.cell_type == "code" and old in c.source]
        cell.source = cell.source.replace(old, new)
    # The kernel starts with this process's environment; it must not inherit the test
    # session's log level, so that what a user sees is what is checked.
    saved = os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
    try:
        client = nbclient.NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(cwd)}},
        )
        client.execute()
    finally:
        if saved is not None:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = saved
    return notebook


def _outputs(notebook) -> list[dict]:
    return [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]


def _check_clean_with_a_plot(notebook) -> None:
    outputs = _outputs(notebook)
    assert not [o for o in outputs if o.output_type == "error"]
    # "Clean": no warnings or TensorFlow start-up lines on stderr.
    stderr = [o.text for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert stderr == [], stderr
    images = [o.data["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    assert images, "no cell shows a plot"
    assert all(base64.b64decode(image).startswith(PNG_MAGIC) for image in images)
    assert all(cell.execution_count for cell in notebook.cells if cell.cell_type == "code")


def _results(notebook) -> list[str]:
    return [
        o.data["text/plain"]
        for o in _outputs(notebook)
        if o.output_type == "execute_result" and "text/plain" in o.data
    ]


def _evaluated_accuracy(notebook) -> float:
    """The accuracy in the first cell result that prints an evaluation dict."""
    evaluation = next(r for r in _results(notebook) if r.startswith("{'loss'"))
    return float(ast.literal_eval(evaluation)["accuracy"])


def _stdout(notebook) -> str:
    return "".join(
        o.text for o in _outputs(notebook) if o.output_type == "stream" and o.name == "stdout"
    )


def test_notebooks_are_committed_without_outputs():
    for path in NOTEBOOKS.glob("*.ipynb"):
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name


def test_quickstart_notebook(tmp_path: Path):
    notebook = _execute("quickstart.ipynb", tmp_path, timeout=600)
    _check_clean_with_a_plot(notebook)
    out = _stdout(notebook)
    assert "MirroredStrategy with 2 replicas" in out
    assert "variables are MirroredVariable" in out  # built inside the strategy scope
    assert out.count("examples/s") >= 5  # a progress bar per epoch
    assert _evaluated_accuracy(notebook) >= 0.85
    (run_dir,) = [p for p in (tmp_path / "outputs").glob("*/*") if p.is_dir()]
    for name in ("curves.png", "metrics.json", "history.csv", "model.keras", "tensorboard"):
        assert (run_dir / name).exists(), name


@pytest.mark.slow
def test_quickstart_notebook_under_auto(tmp_path: Path):
    # The user changes one word of the compose cell; on this CPU machine auto is one device.
    edits = {'"strategy=mirrored",\n        "runtime.logical_devices=2",': '"strategy=auto",'}
    notebook = _execute("quickstart.ipynb", tmp_path, timeout=600, edits=edits)
    _check_clean_with_a_plot(notebook)
    out = _stdout(notebook)
    assert "_target_: kdist.strategies.auto" in out
    assert "OneDeviceStrategy with 1 replicas" in out
    assert out.count("examples/s") >= 5
    assert _evaluated_accuracy(notebook) >= 0.85
    (run_dir,) = [p for p in (tmp_path / "outputs").glob("*/*") if p.is_dir()]
    summary = json.loads((run_dir / "metrics.json").read_text())
    assert summary["num_replicas"] == 1 and summary["strategy"] == "OneDeviceStrategy"
    for name in ("curves.png", "history.csv", "model.keras", "tensorboard"):
        assert (run_dir / name).exists(), name


@pytest.mark.slow
@pytest.mark.multiworker
def test_multiworker_notebook(tmp_path: Path):
    notebook = _execute("multiworker.ipynb", tmp_path, timeout=900)
    _check_clean_with_a_plot(notebook)
    out = _stdout(notebook)
    assert "exit status 0" in out
    assert "arrays (1797, 8, 8, 1) (1797,)" in out  # the data in hand
    assert "with 2 replicas" in out
    # The progress lines come from the chief only.
    assert "[worker 0] Epoch 3/3" in out and "[worker 1] Epoch" not in out
    assert not re.search(r"\] I\d{4} |oneDNN", out), out[:3000]  # the workers start quietly
    assert _evaluated_accuracy(notebook) >= 0.85
    (run_dir,) = (tmp_path / "outputs").glob("multiworker-*")
    assert (run_dir / "curves.png").is_file()  # written by the chief
    # The workers trained on the notebook's arrays, read from the file it saved.
    configs = [p.read_text() for p in run_dir.rglob("config.yaml")]
    assert any(str(tmp_path / "digits_arrays.npz") in text for text in configs)
    assert len(list((tmp_path / "outputs").iterdir())) == 1  # workers wrote nothing else


@pytest.mark.slow
@pytest.mark.multiworker
def test_parameter_server_notebook(tmp_path: Path):
    notebook = _execute("parameter_server.ipynb", tmp_path, timeout=900)
    _check_clean_with_a_plot(notebook)
    out = _stdout(notebook)
    assert "exit status 0" in out
    assert "ParameterServerStrategyV2 with 1 replica(s), 110 steps" in out
    for task in ("ps 0", "worker 0", "worker 1"):
        assert re.search(rf"\[{task}\] .* {task} serving on 127\.0\.0\.1:\d+", out), task
    # The chief trains and prints; the workers and the ps only serve, and start quietly.
    assert "[chief 0] Epoch 5/5" in out
    assert not re.search(r"\[(worker|ps) \d\] .*(Epoch|steps/s)", out)
    assert not re.search(r"\] I\d{4} |oneDNN", out), out[:3000]
    assert _evaluated_accuracy(notebook) >= 0.85
    (run_dir,) = (tmp_path / "outputs").glob("parameter-server-*")
    for name in ("curves.png", "history.csv", "metrics.json", "model.keras"):
        assert (run_dir / name).is_file(), name
    assert len(list((tmp_path / "outputs").iterdir())) == 1  # the chief's run folder only
