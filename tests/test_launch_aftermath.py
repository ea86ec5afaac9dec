"""A chief killed (or Ctrl-C'd) under `kdist launch`: the other workers' reaction is not
shown, one line per task says so, and one line names what happened (issue 52, case 6).

Every test bounds its waits and kills what it started by pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import alive, launch_pids

from kdist.launcher.aftermath import after_a_trainer_failed, say_hidden
from kdist.launcher.tasks import Task

_WAITS = [sys.executable, "-c", "import time; time.sleep(120)"]


def _task(role: str, index: int) -> Task:
    task = Task(role=role, index=index, command=_WAITS, env={}, trains=True)
    task.process = subprocess.Popen(_WAITS)
    return task


def test_once_a_trainer_failed_the_others_lines_are_counted_not_shown():
    chief, other = _task("worker", 0), _task("worker", 1)
    try:
        quiet = after_a_trainer_failed([chief, other])
        assert not quiet(other, "Epoch 3/200 - 22/22 steps")
        started = time.monotonic()
        # An error line with no failed peer is shown, after a bounded wait, once.
        assert not quiet(other, "Traceback (most recent call last):")
        assert not quiet(other, "ValueError: its own error")
        assert time.monotonic() - started < 5
        os.kill(chief.process.pid, signal.SIGKILL)
        # The kill shows within the wait of an alarming line (no reaping needed).
        deadline = time.monotonic() + 30
        while not quiet(other, "UnavailableError: Connection reset by peer"):
            assert time.monotonic() < deadline
        assert quiet(other, "any line at all")
        assert not quiet(chief, "the failed task's own lines are shown")
        other.hidden = 201
        said: list[str] = []
        say_hidden([chief, other], said.append)
        assert said == [
            "worker 1 stopped; 201 line(s) of its output after worker 0 failed not shown"
        ]
        # A trainer that exits 0 or 42 (saved on SIGTERM) is no failure.
        assert chief.process.wait(timeout=30) == -signal.SIGKILL
    finally:
        for task in (chief, other):
            if task.process.poll() is None:
                task.process.kill()
            task.process.wait(timeout=30)


@pytest.mark.multiworker
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_kill_or_ctrl_c_of_the_chief_is_a_few_lines_not_the_others_tracebacks(
    tmp_path: Path, sig: int
):
    """It printed about 200 lines of `UnavailableError` tracebacks from worker 1 before the
    launcher's line."""
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kdist.launch",
            "--workers",
            "2",
            "--run-dir",
            str(tmp_path / "run"),
            "--",
            "strategy=multi_worker_mirrored",
            "trainer.epochs=200",
            "trainer.verbose=2",
        ],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen: list[str] = []
    pids: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 240
        assert launcher.stdout is not None
        for line in launcher.stdout:
            seen.append(line)
            if "[worker 0] Epoch 2/" in line:
                break
            assert time.monotonic() < deadline, "training did not start in time"
        pids = launch_pids("".join(seen))
        os.kill(pids["worker 0"], sig)
        rest, _ = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)
    after = rest.splitlines()
    status = "137 (SIGKILL)" if sig == signal.SIGKILL else "130 (Ctrl-C)"
    assert after[-1] == f"[launch] worker 0 exited with status {status}; stopped every task"
    assert not [line for line in after if line.startswith("[worker 1]")], rest[-3000:]
    assert "Traceback" not in rest and len(after) <= 6, rest[-3000:]
    hidden = [line for line in after if line.startswith("[launch] worker 1 stopped; ")]
    assert len(hidden) <= 1, rest[-3000:]
    assert launcher.returncode != 0
    assert not any(alive(pid) for pid in pids.values())
