"""Elastic restarts of real multi-worker runs: no example lost or repeated.

A counting model (`tests/elastic_models.py`) adds one-hot(example id) into a checkpointed
`[epochs, examples]` variable at every step; after a run that lost a worker and resumed
from a backup with fewer workers, every entry must be exactly 1. 96 examples, a global
batch of 24 (splits over 3 and 2 replicas), 4 steps per epoch, 3 epochs: 12 steps.
Each test starts its own processes on loopback ports, bounds every wait, and checks by
process id that nothing is left running.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from elastic_models import data_overrides, write_data
from helpers import REPO, alive, launch_pids

from kdist.launch import run

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

EXAMPLES, EPOCHS, BATCH = 96, 3, 24
STEPS_PER_EPOCH = EXAMPLES // BATCH
# Worker 2 of 3 dies (SIGKILL) at step 5 every time it runs. The last backup is then the
# one of step 3, in the middle of the first epoch: a resumed run that did not continue the
# data stream exactly would see some examples of that epoch twice and others never.
BACKUP_EVERY, DIE_AT = 3, 5
RESUMED_AT = "continuing at step 3 (epoch 1, step 3 of 4)"


def _die(more: str = "") -> str:
    """The `callbacks.extra` entry that kills worker 2 of 3 at `DIE_AT`; `more` adds keys."""
    return "{_target_: elastic_models.DieAsWorker, index: 2, of: 3, step: " + f"{DIE_AT}{more}}}"


def _job(data: Path, *, callbacks: str = "") -> list[str]:
    return [
        "strategy=multi_worker_mirrored",
        *data_overrides(*write_data(data, examples=EXAMPLES, validation=BATCH)),
        "model=custom",
        "model._target_=elastic_models.counting_model",
        f"+model.examples={EXAMPLES}",
        f"+model.epochs={EPOCHS}",
        f"+model.steps_per_epoch={STEPS_PER_EPOCH}",
        f"trainer.epochs={EPOCHS}",
        f"trainer.global_batch_size={BATCH}",
        "trainer.steps_per_execution=1",
        "trainer.verbose=2",
        f"callbacks.backup.every_n_steps={BACKUP_EVERY}",
        "callbacks.tensorboard.enabled=false",
        "callbacks.saved_model=false",
        "callbacks.curves=false",
        f"callbacks.extra=[{callbacks or _die()}]",
    ]


@pytest.fixture(autouse=True)
def _tests_importable(monkeypatch):
    # The tasks import the counting model; the caller's path (e.g. a worktree) stays first.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(REPO / "tests")])
    )


def _check_every_example_seen_once(run_dir: Path, *, replicas: int = 2) -> None:
    import keras  # elastic_models, imported above, registers CountingModel for loading

    model = keras.models.load_model(run_dir / "model.keras")
    counts = np.asarray(model.counts.numpy())
    assert counts.shape == (EPOCHS, EXAMPLES)
    assert np.array_equal(counts, np.ones_like(counts)), np.argwhere(counts != 1)[:10]
    assert int(model.optimizer.iterations.numpy()) == EPOCHS * STEPS_PER_EPOCH
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == EPOCHS * STEPS_PER_EPOCH
    assert metrics["num_replicas"] == replicas


def _resumed_lines(text: str) -> list[str]:
    return re.findall(r"\[worker \d\] .*(resuming from .*)", text)


def test_a_worker_lost_for_good_finishes_on_two_with_every_example_once(tmp_path: Path):
    run_dir = tmp_path / "run"
    log = io.StringIO()
    code = run(
        3,
        _job(tmp_path / "data"),
        min_workers=2,
        max_restarts=3,
        run_dir=run_dir,
        timeout=900,
        output=log,
    )
    text = log.getvalue()
    (tmp_path / "launch.log").write_text(text)  # kept for reading after a failure
    assert code == 0, text[-5000:]
    # Failed, restarted in place, failed again: lost for good, restarted with 2.
    assert text.count("[launch] worker 2 exited with status 137") == 2, text[-5000:]
    assert (
        "[launch] worker 2 lost for good: restarting with 2 of 3 workers from the last backup"
        in text
    )
    assert "[launch] restart 2 of 3" in text and "restart 3 of 3" not in text
    # The two workers of the last start say what changed: 3 replicas before, 2 now.
    last = [line for line in _resumed_lines(text) if "now " in line and "with 2 replica" in line]
    assert len(last) == 2, _resumed_lines(text)
    assert all("saved by" in line and "with 3 replica(s)" in line for line in last), last
    assert all(RESUMED_AT in line for line in last), last
    _check_every_example_seen_once(run_dir)
    assert not any(alive(pid) for pid in launch_pids(text).values())


def test_a_cluster_restarted_with_fewer_tasks_resumes_exactly(tmp_path: Path):
    """The JobSet/SLURM case: the same job started again with 2 tasks, a new TF_CONFIG."""
    run_dir = tmp_path / "run"
    job = _job(tmp_path / "data")
    first = io.StringIO()
    code = run(3, job, run_dir=run_dir, timeout=600, output=first)
    assert code == 137, first.getvalue()[-5000:]
    assert list((run_dir / "backup").glob("ckpt-*.index")), "no backup before the loss"
    second = io.StringIO()
    code = run(2, job, run_dir=run_dir, timeout=600, output=second)
    text = second.getvalue()
    (tmp_path / "launch.log").write_text(first.getvalue() + text)  # kept for reading
    assert code == 0, text[-5000:]
    resumed = _resumed_lines(text)
    assert len(resumed) == 2, text[-5000:]
    assert all("with 3 replica(s)" in line and "now " in line for line in resumed), resumed
    assert all(re.search(r"now \S+ with 2 replica\(s\)", line) for line in resumed), resumed
    assert all(RESUMED_AT in line for line in resumed), resumed
    _check_every_example_seen_once(run_dir)
    for log in (first, second):
        assert not any(alive(pid) for pid in launch_pids(log.getvalue()).values())


def test_a_shrunk_run_grows_back_and_sees_every_example_once(tmp_path: Path):
    """Slot 2 dies twice and comes back healthy; the 2-worker start is asked to grow back.

    The 2-worker start sleeps 3 s per step (27 s for its 9 steps), so the grow request
    after 25 s comes while it trains: every worker saves at an agreed step and exits 42.
    (If start-up took longer than 25 s, worker 0 is stopped before it can save and the
    cluster grows back from the backup of step 3: the counts must hold either way.)
    """
    run_dir = tmp_path / "run"
    die = _die(f", times: 2, record: '{tmp_path / 'deaths'}'")
    slow = "{_target_: elastic_models.SlowWithWorkers, of: 2, seconds: 3}"
    log = io.StringIO()
    code = run(
        3,
        _job(tmp_path / "data", callbacks=f"{die}, {slow}"),
        min_workers=2,
        max_restarts=2,
        grow_after=25,
        run_dir=run_dir,
        timeout=900,
        output=log,
    )
    text = log.getvalue()
    (tmp_path / "launch.log").write_text(text)  # kept for reading after a failure
    assert code == 0, text[-5000:]
    assert "[launch] worker 2 lost for good: restarting with 2 of 3 workers" in text
    assert "[launch] asking worker 0 to save a backup (SIGTERM) to grow the cluster back" in text
    assert "[launch] growing back: restarting with 3 of 3 workers" in text
    assert "restart 2 of 2" in text and "restart 3 of" not in text  # growing is not counted
    _check_every_example_seen_once(run_dir, replicas=3)
    assert not any(alive(pid) for pid in launch_pids(text).values())
