"""Chaos: kill -9 of a random task of a 2-worker run at a random step, then relaunch.

Five rounds with a fixed seed. Each round must end with the weights of an uninterrupted
run (1e-6), no process of either launch left (checked by pid) and no scratch folder left.
About 3 minutes on 2 cores.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, alive, launch_pids, start_launch

from kdist.cluster.chief import scratch_prefix
from kdist.launch import run

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SEED = 1313
ROUNDS = 5
STEPS = 20
JOB = [
    "strategy=multi_worker_mirrored",
    "model.units=[16]",
    "trainer.epochs=2",
    f"trainer.steps_per_epoch={STEPS // 2}",
    "trainer.global_batch_size=32",
    "trainer.steps_per_execution=1",
    "trainer.verbose=2",
    "runtime.deterministic=true",
    "callbacks.tensorboard.enabled=false",
    "callbacks.curves=false",
    "callbacks.backup.every_n_steps=3",
]


def _weights(run_dir: Path) -> list[np.ndarray]:
    import keras

    return [np.asarray(w) for w in keras.models.load_model(run_dir / "model.keras").get_weights()]


def _scratch(run_dir: Path) -> list[Path]:
    found = []
    for index in (0, 1):
        prefix = Path(scratch_prefix(run_dir, "worker", index))
        found += list(prefix.parent.glob(f"{prefix.name}*"))
    return found


def _launch(tmp_path: Path, run_dir: Path, extra: list[str]) -> tuple[int | None, list[int], str]:
    """One launch until it ends (bounded): its exit status, its pids and the tasks', output."""
    launcher = start_launch(
        ["--workers", "2", "--run-dir", str(run_dir), "--", *JOB, *extra], cwd=tmp_path
    )
    try:
        text, _ = launcher.communicate(timeout=300)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)
            assert launcher.stdout is not None
            launcher.stdout.close()
    return launcher.returncode, [launcher.pid, *launch_pids(text).values()], text


def _gone(pids, seconds: float = 30) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


@pytest.fixture(autouse=True)
def _tests_importable(monkeypatch):
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])
    )


def test_five_rounds_of_kill_9_then_relaunch_lose_nothing(tmp_path: Path):
    log = io.StringIO()
    reference_dir = tmp_path / "reference"
    assert run(2, JOB, run_dir=reference_dir, timeout=300, output=log) == 0, log.getvalue()
    reference = _weights(reference_dir)
    rng = random.Random(SEED)
    victims = ["worker 0", "worker 1", "launcher"]
    plan = [(rng.choice(victims), rng.randint(2, STEPS - 2)) for _ in range(ROUNDS)]
    for number, (victim, step) in enumerate(plan):
        run_dir = tmp_path / f"round{number}"
        once = tmp_path / f"killed-{number}"
        index = 0 if victim == "launcher" else int(victim[-1])
        kill = (
            f"callbacks.extra=[{{_target_: helpers.KillAtStep, step: {step}, "
            f"once_file: '{once}', only_worker: {index}, parent: {victim == 'launcher'}}}]"
        )
        first, first_pids, text = _launch(tmp_path, run_dir, [kill])
        where = f"round {number}: kill -9 of {victim} at step {step}"
        assert once.exists(), f"{where}: nothing was killed\n{text[-3000:]}"
        assert first == (-signal.SIGKILL if victim == "launcher" else 137), f"{where}\n{text}"
        assert not _gone(first_pids), f"{where}: left running"
        second, second_pids, text = _launch(tmp_path, run_dir, [kill])
        assert second == 0, f"{where}: relaunch\n{text[-3000:]}"
        assert json.loads((run_dir / "metrics.json").read_text())["steps"] == STEPS
        worst = max(
            float(np.max(np.abs(a - b))) for a, b in zip(_weights(run_dir), reference, strict=True)
        )
        assert worst < 1e-6, f"{where}: weights differ by {worst}"
        assert not _gone(second_pids), f"{where}: left running"
        assert not _scratch(run_dir), f"{where}: scratch left"
        assert not list(run_dir.glob("backup/*_temp*")), f"{where}: temp files left"
