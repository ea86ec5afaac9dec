"""The files a run's path enters before its first step (issue 51), counted by
`benchmarks.run_path` in a process of its own per walk, stay within their budgets.

A budget is the issue's target where it is met (a resume in another sync mode: 5 files),
else the count on the commit that added this test, so a change that lengthens a path
fails here, naming the files entered; lower a budget when a change shortens its path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

BUDGETS = {
    "resume": 5,  # issue 51's target, met
    "notebook-fit": 51,  # the target is 36 from `Experiment(...)`
    "notebook": 64,
    "cli": 82,  # the target is about 25
}

# The files on the stack when the first step begins (the functions that decide the
# order), and how often that stack comes back to a file it had left: issue 51's targets,
# at most 4 files and no back and forth (Hydra's call back into `train.py` is Hydra's).
DECIDING = {"notebook": (3, 0), "notebook-fit": (3, 0), "cli": (4, 0)}


def _walk(tmp_path: Path, name: str) -> dict:
    out = tmp_path / f"{name}.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run_path", name, "--json", str(out)],
        cwd=REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_a_path_enters_no_more_files_than_its_budget(tmp_path, name):
    walk = _walk(tmp_path, name)
    files = walk["files"]
    assert len(files) <= BUDGETS[name], f"{name}: {len(files)} files: {sorted(files)}"
    # A walk that stopped early would pass: each reaches its end.
    if name == "resume":
        assert "engine/checkpoint/parts.py" in files, sorted(files)
    else:
        assert walk["stepped"], f"{name} never reached the first training step"
    if name in DECIDING:
        most, returns = DECIDING[name]
        assert len(walk["deciding"]) <= most, f"{name}: deciding files {walk['deciding']}"
        assert walk["returns"] <= returns, f"{name}: {walk['returns']} returns: {walk['deciding']}"
        assert walk["deciding"][-1] == "engine/standard_runner.py", walk["deciding"]
    calls = {call for names in files.values() for call in names}
    assert not calls & {"find_spec", "exec_module"}, "the import hook's calls are imports"
