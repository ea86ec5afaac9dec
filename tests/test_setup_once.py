"""A run is set up once (issue 51): composed, validated, its cluster resolved and its resume
checked a single time, on the command line, in a notebook, in a launcher's task and in
each job of a sweep. `setup_counter.py` counts the calls by code object in a process of
its own; a composition is any Hydra makes (`hydra.main` would make two more of a run's
config: `kdist train` runs Hydra's job on the config it composed and checked,
`kdist.run_setup`, `kdist.train.precheck`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SMALL_JOB, free_port

from kdist.cluster import tf_config_for

COUNTER = Path(__file__).with_name("setup_counter.py")


def _counts(tmp_path: Path, mode: str, args: list[str], env: dict | None = None) -> dict:
    out = tmp_path / "counts.json"
    done = subprocess.run(
        [sys.executable, str(COUNTER), str(out), mode, *args],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(out.read_text())
    keys = ("compose", "kdist_compose", "validate", "cluster", "resume")
    return {key: counts.get(key, 0) for key in keys}


ONCE = {"compose": 1, "kdist_compose": 1, "validate": 1, "cluster": 1, "resume": 1}


def test_the_command_line_sets_a_run_up_once(tmp_path: Path):
    # A named folder: checked before Hydra opens its train.log, under its lock.
    args = [*SMALL_JOB, f"hydra.run.dir={tmp_path / 'run'}"]
    assert _counts(tmp_path, "cli", args) == ONCE


def test_a_run_from_a_folder_of_configs_is_composed_once(tmp_path: Path):
    # `-cd`: the user's folder searched first, as Hydra's app searches it; its own config
    # is the one composed (and checked, `kdist.config.compose.check_config_dir`).
    folder = tmp_path / "recipes"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "tiny.yaml").write_text("defaults:\n  - mlp\n  - _self_\ndropout: 0.25\n")
    args = ["-cd", str(folder), *SMALL_JOB, "model=tiny", f"hydra.run.dir={tmp_path / 'run'}"]
    assert _counts(tmp_path, "cli", args) == ONCE
    saved = (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    assert "dropout: 0.25" in saved


@pytest.mark.slow  # two runs in processes of their own (about 40 s beside a load)
def test_a_resumed_run_is_checked_once(tmp_path: Path):
    args = [*SMALL_JOB, f"hydra.run.dir={tmp_path / 'run'}", "callbacks=default"]
    _counts(tmp_path, "cli", args)
    assert list((tmp_path / "run" / "backup").glob("ckpt-*.index"))  # what a re-run resumes
    assert _counts(tmp_path, "cli", [*args, "trainer.epochs=2"]) == ONCE


def test_a_notebook_experiment_sets_up_once(tmp_path: Path):
    # Its backups on (`callbacks=default`): the run folder's resume is checked.
    args = [*SMALL_JOB, "callbacks=default", f"run_dir={tmp_path / 'nb'}"]
    assert _counts(tmp_path, "notebook", args) == ONCE


@pytest.mark.slow  # a one-worker cluster in a process of its own (about 20 s)
def test_a_launcher_task_sets_up_once(tmp_path: Path):
    # A task as `kdist launch` starts it: TF_CONFIG names its cluster (one worker here).
    port = free_port()
    env = {"TF_CONFIG": tf_config_for({"worker": [f"localhost:{port}"]}, "worker", 0)}
    args = [*SMALL_JOB, "strategy=multi_worker_mirrored", f"hydra.run.dir={tmp_path / 'run'}"]
    assert _counts(tmp_path, "cli", args, env) == ONCE


@pytest.mark.slow  # a sweep of two jobs in a process of its own (about 30 s)
def test_each_job_of_a_sweep_sets_up_once(tmp_path: Path):
    jobs = 2
    seeds = ",".join(str(seed) for seed in range(jobs))
    args = ["-m", *SMALL_JOB, f"runtime.seed={seeds}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    counts = _counts(tmp_path, "cli", args)
    # The jobs share the cluster the command resolved before Hydra started them. A sweep's
    # configs are composed by Hydra's sweep (`hydra.main`), none by kdist.
    del counts["compose"]
    assert counts == {"kdist_compose": 0, "validate": jobs, "cluster": 1, "resume": jobs}
