"""`pip install .` (not editable) works from another folder: conf/ ships in the wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import REPO

pytestmark = pytest.mark.slow


def test_wheel_installs_and_trains_from_another_folder(tmp_path: Path, monkeypatch):
    # Without PYTHONPATH: a checkout on it (a clone tested with PYTHONPATH=.) would be the
    # kdist that pip and the new environment find.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
        check=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("kdist-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "kdist/conf/train.yaml" in names
    assert "kdist/conf/model/cnn.yaml" in names
    assert "kdist/py.typed" in names  # PEP 561: a user's mypy reads kdist's annotations

    # A fresh virtual environment that sees the dependencies already installed here,
    # with kdist itself only from the wheel.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = subprocess.run(
        [
            sys.executable,
            "-c",
            "import keras, os; print(os.path.dirname(os.path.dirname(keras.__file__)))",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "kdist_test_deps.pth").write_text(deps + "\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
        check=True,
        timeout=600,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONNOUSERSITE": "1"}
    where = subprocess.run(
        [str(python), "-c", "import kdist; print(kdist.__file__)"],
        cwd=elsewhere,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert where.startswith(site), where  # the wheel's copy, not the editable checkout
    result = subprocess.run(
        [str(python), "-m", "kdist.train", "trainer.epochs=1"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (metrics,) = elsewhere.glob("outputs/*/*/metrics.json")
    assert json.loads(metrics.read_text())["epochs"] == 1

    # The installed `kdist` script: its version line, and Hydra's completion as bash asks
    # it (`kdist -sc query=bash` with the typed line in COMP_LINE), schema entries left out.
    script = venv / "bin" / "kdist"
    version = subprocess.run(
        [str(script), "--version"], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("kdist ") and "TensorFlow 2.21" in version.stdout
    for line in ("kdist train strategy=", "kdist tune strategy="):
        query = subprocess.run(
            [str(script), "-sc", "query=bash"],
            cwd=elsewhere,
            env={**env, "COMP_LINE": line, "COMP_POINT": str(len(line))},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert query.returncode == 0, query.stderr
        assert "strategy=mirrored" in query.stdout.split(), query.stdout
        assert "base_" not in query.stdout
    install = subprocess.run(
        [str(script), "-sc", "install=bash"], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert install.stdout.strip().endswith("-F hydra_bash_completion kdist"), install.stdout
