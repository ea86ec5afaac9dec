"""The sidecar evaluator: `python -m kdist.evaluate run_dir=... watch=true`."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import alive

EPOCHS, STEPS = 3, 5


def _start(module: str, args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_sidecar_evaluates_each_checkpoint_once_and_stops_with_the_run(tmp_path: Path):
    # Started first: it waits for the run's config, then for each checkpoint.
    sidecar = _start(
        "kdist.evaluate",
        ["run_dir=run", "watch=true", "poll_seconds=0.3", "timeout=240"],
        tmp_path,
    )
    trainer = _start(
        "kdist.train",
        [
            f"trainer.epochs={EPOCHS}",
            f"trainer.steps_per_epoch={STEPS}",
            "trainer.verbose=0",
            "callbacks.tensorboard.enabled=false",
            "hydra.run.dir=run",
        ],
        tmp_path,
    )
    try:
        train_out, _ = trainer.communicate(timeout=240)
        assert trainer.returncode == 0, train_out[-3000:]
        side_out, _ = sidecar.communicate(timeout=240)
        assert sidecar.returncode == 0, side_out[-3000:]
    finally:
        for process in (trainer, sidecar):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
    assert not alive(trainer.pid) and not alive(sidecar.pid)
    with (tmp_path / "run" / "eval.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    # One row per checkpoint (one per epoch), each evaluated exactly once.
    assert [int(r["step"]) for r in rows] == [STEPS * (e + 1) for e in range(EPOCHS)]
    assert [float(r["epoch"]) for r in rows] == [1.0, 2.0, 3.0]
    assert all(0.0 <= float(r["accuracy"]) <= 1.0 and float(r["loss"]) > 0 for r in rows)
    assert "evaluated 3 checkpoint(s); the run has finished" in side_out
    assert list((tmp_path / "run" / "tensorboard" / "eval").glob("events.out.tfevents.*"))


def test_the_launcher_plans_an_evaluator_without_cluster_or_gpu(tmp_path: Path):
    from kdist.launcher.tasks import plan_tasks as _plan

    tasks = _plan(
        workers=2,
        ps=0,
        module="kdist.train",
        overrides=["strategy=multi_worker_mirrored"],
        host="127.0.0.1",
        run_dir=tmp_path / "run",
        base_env={"TF_CONFIG": "{}", "PATH": os.environ.get("PATH", "")},
        devices={("worker", 0): "0", ("worker", 1): "1", ("evaluator", 0): ""},
        evaluator=True,
    )
    evaluator = next(t for t in tasks if t.role == "evaluator")
    assert not evaluator.trains
    assert "TF_CONFIG" not in evaluator.env and evaluator.env["CUDA_VISIBLE_DEVICES"] == ""
    assert evaluator.command[-5:] == [
        "kdist.evaluate",
        f"run_dir={tmp_path / 'run'}",
        "watch=true",
        "poll_seconds=2",
        "trust_run_dir=true",
    ]
    assert sorted(t.name for t in tasks if t.trains) == ["worker 0", "worker 1"]


@pytest.mark.slow
@pytest.mark.multiworker
def test_launch_with_an_evaluator_beside_two_workers(tmp_path: Path):
    import io

    from helpers import launch_pids

    from kdist.launch import run

    log = io.StringIO()
    code = run(
        2,
        [
            "strategy=multi_worker_mirrored",
            f"trainer.epochs={EPOCHS}",
            f"trainer.steps_per_epoch={STEPS}",
            "trainer.verbose=0",
            "callbacks.tensorboard.enabled=false",
        ],
        run_dir=tmp_path / "run",
        timeout=300,
        output=log,
        evaluator=True,
    )
    text = log.getvalue()
    assert code == 0, text[-3000:]
    assert "[evaluator 0] [sidecar] evaluated 3 checkpoint(s)" in text
    with (tmp_path / "run" / "eval.csv").open(newline="") as handle:
        steps = [int(r["step"]) for r in csv.DictReader(handle)]
    assert steps == [STEPS * (e + 1) for e in range(EPOCHS)]
    assert not any(alive(pid) for pid in launch_pids(text).values())
