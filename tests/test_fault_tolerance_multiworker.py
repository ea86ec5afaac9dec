"""Fault tolerance with 2 workers under `kdist.launch`: crash, preemption and NaN, nothing lost."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, alive, compose

import kdist
from kdist.cluster.chief import remove_scratch, scratch_prefix
from kdist.evaluation.reopen import evaluate_run
from kdist.launch import run

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

JOB = [
    "strategy=multi_worker_mirrored",
    "trainer.epochs=3",
    "trainer.steps_per_epoch=12",
    "trainer.global_batch_size=32",
    "trainer.steps_per_execution=1",
    "trainer.verbose=2",
    "runtime.deterministic=true",
    "callbacks.backup.every_n_steps=5",
    "callbacks.saved_model=true",
]


def _weights(run_dir: Path) -> list[np.ndarray]:
    import keras

    return [np.asarray(w) for w in keras.models.load_model(run_dir / "model.keras").get_weights()]


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> Path:
    """An uninterrupted run of `JOB` on 2 workers."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    log = io.StringIO()
    assert run(2, JOB, run_dir=run_dir, timeout=600, output=log) == 0, log.getvalue()[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def reference(reference_run: Path) -> list[np.ndarray]:
    return _weights(reference_run)


def test_the_exported_model_evaluates_to_the_runs_metrics_on_one_device(reference_run: Path):
    # Trained on 2 workers (the chief exports); evaluated here on one device.
    assert (reference_run / "model.keras").is_file()
    assert (reference_run / "saved_model" / "saved_model.pb").is_file()
    recorded = json.loads((reference_run / "metrics.json").read_text())["validation"]
    evaluated = evaluate_run(reference_run, ["strategy=one_device"])
    assert set(evaluated) == set(recorded) == {"loss", "accuracy"}
    for name, value in recorded.items():
        assert abs(evaluated[name] - value) <= 1e-6, (name, evaluated[name], value)


@pytest.fixture(autouse=True)
def _tests_importable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO / "tests"))


def test_sigkill_of_a_worker_is_restarted_and_loses_nothing(tmp_path: Path, reference):
    run_dir = tmp_path / "run"
    once = tmp_path / "killed-once"
    log = io.StringIO()
    code = run(
        2,
        [
            *JOB,
            f"callbacks.extra=[{{_target_: helpers.KillAtStep, step: 23, "
            f"once_file: '{once}', only_worker: 1}}]",
        ],
        max_restarts=1,
        run_dir=run_dir,
        timeout=900,
        output=log,
    )
    text = log.getvalue()
    assert code == 0, text[-4000:]
    assert once.exists()
    assert "worker 1 exited with status 137" in text and "restart 1 of 1" in text
    # Both workers resumed at the last backup (step 20): at most 3 steps were redone.
    assert len(re.findall(r"continuing at step 20 \(epoch 2, step 8 of 12\)", text)) == 2
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 36
    assert _max_diff(_weights(run_dir), reference) < 1e-6


def test_only_the_chief_writes_checkpoints(tmp_path: Path):
    # Every worker makes a save's host copies (reading a multi-worker variable may take a
    # collective); only the chief writes them. Worker 1, killed after four backups, leaves
    # no checkpoint file in its scratch folders (a synchronous save wrote one there).
    run_dir = tmp_path / "run"
    log = io.StringIO()
    kill = "callbacks.extra=[{_target_: helpers.KillAtStep, step: 23, only_worker: 1}]"
    try:
        code = run(2, [*JOB, kill], run_dir=run_dir, timeout=900, output=log)
        text = log.getvalue()
        assert code != 0 and "worker 1 exited with status 137" in text, text[-3000:]
        assert (run_dir / "backup" / "ckpt-20.index").exists()
        prefix = Path(scratch_prefix(run_dir, "worker", 1))
        assert not list(prefix.parent.glob(f"{prefix.name}ckpt-*"))
    finally:
        remove_scratch(run_dir, "worker", 1)


def test_sigterm_to_one_worker_saves_on_both_and_resumes(tmp_path: Path, reference):
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "kdist.launch",
        "--workers",
        "2",
        "--max-restarts",
        "1",
        "--run-dir",
        str(run_dir),
        "--",
        *JOB,
        "callbacks.backup.every_n_steps=1000",
        "callbacks.extra=[{_target_: helpers.StopAtStep, step: 100000}]",
    ]
    launcher = subprocess.Popen(
        command,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert launcher.stdout is not None
        deadline = time.monotonic() + 300
        for line in launcher.stdout:
            seen.append(line)
            if "[worker 0] Epoch 2/" in line:
                break
            assert time.monotonic() < deadline
        pids = dict(re.findall(r"\[launch\] (worker \d) pid (\d+)", "".join(seen)))
        os.kill(int(pids["worker 1"]), signal.SIGTERM)
        rest, _ = launcher.communicate(timeout=600)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)
    text = "".join(seen) + rest
    assert launcher.returncode == 0, text[-4000:]
    assert "exited with status 42" in text
    saves = re.findall(r"\[(worker \d)\] .*saving a backup at an agreed step", text)
    assert sorted(saves) == ["worker 0", "worker 1"]
    resumed = re.findall(r"\[(worker \d)\] .*continuing at step (\d+) ", text)
    assert len(resumed) == 2 and resumed[0][1] == resumed[1][1], resumed
    step = int(resumed[0][1])
    assert 12 <= step < 36 and step % 1000 != 0
    assert json.loads((run_dir / "metrics.json").read_text())["steps"] == 36
    assert _max_diff(_weights(run_dir), reference) < 1e-6
    assert not any(alive(int(pid)) for pid in pids.values())
    for index in (0, 1):
        prefix = Path(scratch_prefix(run_dir, "worker", index))
        assert not list(prefix.parent.glob(f"{prefix.name}*"))


def test_nan_stops_both_workers_with_status_3_and_the_backup_stays_finite(tmp_path: Path):
    # The loss is all-reduced, so both workers see NaN at the same step and stop; the
    # launcher stops with the NaN guard's status, and the newest backup predates the NaN.
    run_dir = tmp_path / "run"
    log = io.StringIO()
    code = run(
        2,
        [*JOB, "callbacks.extra=[{_target_: helpers.InjectNaN, step: 14}]"],
        run_dir=run_dir,
        timeout=300,
        output=log,
    )
    text = log.getvalue()
    assert code == 3, text[-4000:]
    stopped = re.findall(r"\[(worker \d)\] kdist: error: training loss is nan after step 15", text)
    assert sorted(stopped) == ["worker 0", "worker 1"], text[-4000:]
    backups = sorted(
        int(p.name.split("-")[1].split(".")[0]) for p in run_dir.glob("backup/*.index")
    )
    assert backups == [5, 10]
    check = kdist.Experiment(
        compose([o for o in JOB if not o.startswith("strategy=")]), run_dir=run_dir
    )
    check.build_model()
    assert check.restore() == 10
    assert all(np.all(np.isfinite(np.asarray(w))) for w in check.model.get_weights())


def test_a_truncated_newest_backup_makes_both_workers_resume_from_the_previous(tmp_path: Path):
    # Both workers must skip the same unreadable checkpoint and agree on the step, or the
    # first all-reduce would pair different steps.
    run_dir = tmp_path / "run"
    job = [o for o in JOB if not o.startswith("trainer.epochs=")]
    log = io.StringIO()
    code = run(2, [*job, "trainer.epochs=1"], run_dir=run_dir, timeout=300, output=log)
    assert code == 0, log.getvalue()[-3000:]
    data = run_dir / "backup" / "ckpt-12.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    log = io.StringIO()
    code = run(2, [*job, "trainer.epochs=2"], run_dir=run_dir, timeout=300, output=log)
    text = log.getvalue()
    assert code == 0, text[-4000:]
    skipped = re.findall(r"\[(worker \d)\] .*ckpt-12 cannot be restored", text)
    resumed = re.findall(r"\[(worker \d)\] .*continuing at step (\d+) ", text)
    assert sorted(skipped) == ["worker 0", "worker 1"], text[-4000:]
    assert sorted(resumed) == [("worker 0", "10"), ("worker 1", "10")], resumed
    assert json.loads((run_dir / "metrics.json").read_text())["steps"] == 24
