"""Multi-worker training through `kdist.launch`: 2 local workers on loopback ports.

Each test starts its own processes, bounds every wait, and checks by process id that
nothing is left running.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import SMALL_JOB, alive, compose, launch_pids

import kdist
from kdist.cluster.chief import scratch_prefix
from kdist.launch import run
from kdist.launcher.tasks import free_ports
from kdist.runs.fileio import read_csv

pytestmark = pytest.mark.multiworker

EXACT = [
    "model=cnn",
    "model.dense_units=64",
    "data.shuffle=false",
    "trainer.epochs=2",
    "trainer.steps_per_epoch=6",
    "trainer.global_batch_size=32",
    "trainer.steps_per_execution=3",
    "optimizer=sgd",
    "optimizer.learning_rate=0.05",
    "runtime.seed=7",
]


def _temp_leftovers() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("kdist-worker*")}


def test_free_ports_are_distinct():
    ports = free_ports(5)
    assert len(set(ports)) == 5 and all(p > 0 for p in ports)


def test_two_workers_match_one_device_and_only_the_chief_writes(tmp_path: Path):
    before = _temp_leftovers()
    log = io.StringIO()
    run_dir = tmp_path / "run"
    code = run(
        2,
        ["strategy=multi_worker_mirrored", *EXACT],
        run_dir=run_dir,
        timeout=240,
        output=log,
    )
    text = log.getvalue()
    assert code == 0, text[-3000:]
    # Both workers report the same final metrics.
    finals = re.findall(r"\[(worker \d)\] .*validation: (loss [\d.]+, accuracy [\d.]+)", text)
    assert {w for w, _ in finals} == {"worker 0", "worker 1"}
    assert len({m for _, m in finals}) == 1, finals
    # Only the chief's run directory holds outputs, and nothing else was left behind.
    names = {p.name for p in run_dir.iterdir()}
    assert {"metrics.json", "model.keras", "history.csv", "train.log", ".hydra"} <= names
    assert _temp_leftovers() <= before
    assert not any(alive(pid) for pid in launch_pids(text).values())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["strategy"] == "CollectiveAllReduceStrategy"
    assert metrics["num_replicas"] == 2
    assert metrics["steps"] == 12

    # The same global batch of 32 on one device gives the same weights.
    import keras

    two = keras.models.load_model(run_dir / "model.keras").get_weights()
    exp = kdist.Experiment(
        compose(["strategy=one_device", *EXACT, "trainer.verbose=0", "callbacks=minimal"]),
        run_dir=tmp_path / "one",
    )
    exp.fit()
    one = exp.model.get_weights()
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(one, two, strict=True))
    assert worst < 1e-5, worst


def test_sigkill_of_one_worker_stops_the_launch_within_60s(tmp_path: Path):
    command = [
        sys.executable,
        "-m",
        "kdist.launch",
        "--workers",
        "2",
        "--run-dir",
        str(tmp_path / "r"),
        "--",
        "strategy=multi_worker_mirrored",
        "trainer.epochs=200",
        "trainer.verbose=2",
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
        deadline = time.monotonic() + 180
        assert launcher.stdout is not None
        for line in launcher.stdout:
            seen.append(line)
            if "[worker 0] Epoch 3/" in line:
                break
            assert time.monotonic() < deadline, "training did not start in time"
        pids = launch_pids("".join(seen))
        os.kill(pids["worker 1"], signal.SIGKILL)
        killed_at = time.monotonic()
        rest, _ = launcher.communicate(timeout=90)
        elapsed = time.monotonic() - killed_at
        text = "".join(seen) + rest
        assert launcher.returncode != 0
        assert elapsed < 60, elapsed
        assert "worker 1 exited with status 137" in text
        assert not any(alive(pid) for pid in pids.values())
        # The killed worker could not remove its scratch folders; the launcher did.
        prefix = Path(scratch_prefix(tmp_path / "r", "worker", 1))
        assert not list(prefix.parent.glob(f"{prefix.name}*"))
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)


def test_a_failing_task_stops_the_others_and_restarts_are_counted(tmp_path: Path):
    script = tmp_path / "flaky.py"
    # Worker 1 fails at once; worker 0 would otherwise sleep for a long time.
    script.write_text(
        "import json, os, sys, time\n"
        "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
        "print('started', index, flush=True)\n"
        "sys.exit(3) if index == 1 else time.sleep(600)\n"
    )
    log = io.StringIO()
    started = time.monotonic()
    code = run(
        2,
        [],
        module="flaky",
        max_restarts=1,
        run_dir=tmp_path / "r",
        output=log,
        timeout=120,
        grace_seconds=2,
    )
    text = log.getvalue()
    assert code == 3, text
    assert time.monotonic() - started < 60
    assert text.count("[worker 1] started 1") == 2  # the first run and one restart
    assert "restart 1 of 1" in text
    assert not any(alive(pid) for pid in launch_pids(text).values())


@pytest.fixture(autouse=True)
def _importable_tmp(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )


def test_timeout_stops_everything(tmp_path: Path):
    (tmp_path / "sleepy.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    log = io.StringIO()
    code = run(2, [], module="sleepy", timeout=3, grace_seconds=1, output=log, run_dir=tmp_path)
    assert code == 124
    assert not any(alive(pid) for pid in launch_pids(log.getvalue()).values())


def test_cli_rejects_bad_arguments(tmp_path: Path):
    for args, message in [
        (["--workers", "0"], "--workers (0) must be a positive integer"),
        (["--workers", "2", "--bogus", "1"], "unknown option --bogus"),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "kdist.launch", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert result.returncode == 2
        assert message in result.stderr


def test_bad_tf_config_in_a_worker_exits_2(tmp_path: Path):
    env = {**os.environ, "TF_CONFIG": '{"clusters": {"worker": ["127.0.0.1:1"]}}'}
    result = subprocess.run(
        [sys.executable, "-m", "kdist.train", "strategy=multi_worker_mirrored"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 2
    assert "kdist: config error: TF_CONFIG: unknown key 'clusters'" in result.stderr
    assert not (tmp_path / "outputs").exists()


def test_mixed_float16_with_xla_trains_on_two_workers(tmp_path: Path):
    # Loss scaling and XLA-compiled replica steps with the collective all-reduce.
    log = io.StringIO()
    run_dir = tmp_path / "run"
    code = run(
        2,
        [
            "strategy=multi_worker_mirrored",
            *SMALL_JOB,
            "runtime.mixed_precision=mixed_float16",
            "runtime.jit_compile=true",
        ],
        run_dir=run_dir,
        timeout=300,
        output=log,
    )
    text = log.getvalue()
    assert code == 0, text[-3000:]
    assert "runtime.jit_compile" not in text  # no step fell back to running without XLA
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 6 and metrics["num_replicas"] == 2
    assert math.isfinite(metrics["train"]["loss"]) and math.isfinite(metrics["validation"]["loss"])
    finals = re.findall(r"\[(worker \d)\] validation accuracy: ([\d.]+)", text)
    assert len(finals) == 2 and finals[0][1] == finals[1][1]


@pytest.mark.slow
def test_cnn_on_two_workers_reaches_095(tmp_path: Path):
    log = io.StringIO()
    code = run(
        2,
        ["strategy=multi_worker_mirrored", "model=cnn", "trainer.verbose=0"],
        run_dir=tmp_path / "run",
        timeout=900,
        output=log,
    )
    text = log.getvalue()
    assert code == 0, text[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["validation"]["accuracy"] >= 0.95
    finals = re.findall(r"\[(worker \d)\] validation accuracy: ([\d.]+)", text)
    assert len(finals) == 2 and finals[0][1] == finals[1][1]
    assert not any(alive(pid) for pid in launch_pids(text).values())


@pytest.mark.slow
def test_multirun_under_the_launcher_writes_one_sweep_folder(tmp_path: Path):
    log = io.StringIO()
    sweep = tmp_path / "sweep"
    code = run(
        2,
        [
            "-m",
            "strategy=multi_worker_mirrored",
            "optimizer.learning_rate=1e-3,3e-3",
            "trainer=fast_dev",
            "trainer.verbose=0",
        ],
        run_dir=sweep,
        timeout=600,
        output=log,
    )
    assert code == 0, log.getvalue()[-3000:]
    folders = sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    # The jobs' folders, and the sweep's TensorBoard runs named by the swept values (issue 52).
    assert folders == ["0", "1", "tensorboard"]
    jobs = ["0", "1"]
    assert len(list((sweep / "tensorboard").iterdir())) == 2
    for job in jobs:
        assert (sweep / job / "metrics.json").is_file()
    # The chief's summary: one row per job, both trained on the 2 workers.
    rows = read_csv(sweep / "summary.csv")
    assert [(r["job"], r["status"], r["num_replicas"]) for r in rows] == [
        ("0", "COMPLETED", "2"),
        ("1", "COMPLETED", "2"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workers", "ps", "strategy", "replicas"),
    [
        (2, 0, "multi_worker_mirrored", "2"),
        (1, 1, "parameter_server", "1"),
    ],
    ids=["mwms", "ps"],
)
def test_the_optuna_recipe_under_a_local_cluster(
    tmp_path: Path, workers: int, ps: int, strategy: str, replicas: str
):
    # Every trainer runs the sweeper; its sampler is seeded and every worker sees the same
    # objective, so they propose the same trials. Only the chief writes the sweep folder.
    log = io.StringIO()
    sweep = tmp_path / "sweep"
    code = run(
        workers,
        [
            "-cd",
            str(Path(__file__).resolve().parents[1] / "recipes"),
            "-cn",
            "optuna_sweep",
            "-m",
            "hydra.sweeper.n_trials=3",
            f"strategy={strategy}",
            "trainer=fast_dev",
            "trainer.verbose=0",
            "callbacks=minimal",
        ],
        ps=ps,
        run_dir=sweep,
        timeout=900,
        output=log,
    )
    text = log.getvalue()
    assert code == 0, text[-3000:]
    rows = read_csv(sweep / "summary.csv")
    assert [(r["job"], r["status"], r["num_replicas"]) for r in rows] == [
        (str(i), "COMPLETED", replicas) for i in range(3)
    ]
    assert (sweep / "optimization_results.yaml").is_file()
    best = re.findall(r"\[(\w+ \d)\] .*Best parameters: (.*)", text)
    assert len(best) == (1 if ps else workers), best
    assert len({params for _, params in best}) == 1
    assert not any(alive(pid) for pid in launch_pids(text).values())


@pytest.mark.slow
def test_collective_timeout_turns_a_stalled_worker_into_an_error(tmp_path: Path):
    command = [
        sys.executable,
        "-m",
        "kdist.launch",
        "--workers",
        "2",
        "--run-dir",
        str(tmp_path / "r"),
        "--",
        "strategy=multi_worker_mirrored",
        "strategy.timeout_seconds=5",
        "trainer.epochs=200",
        "trainer.verbose=2",
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
        deadline = time.monotonic() + 180
        assert launcher.stdout is not None
        for line in launcher.stdout:
            seen.append(line)
            if "[worker 0] Epoch 3/" in line:
                break
            assert time.monotonic() < deadline, "training did not start in time"
        pids = launch_pids("".join(seen))
        os.kill(pids["worker 1"], signal.SIGSTOP)  # alive but silent: no heartbeat loss yet
        stopped_at = time.monotonic()
        rest, _ = launcher.communicate(timeout=120)
        elapsed = time.monotonic() - stopped_at
        text = "".join(seen) + rest
        assert launcher.returncode != 0
        assert "DeadlineExceeded" in text or "Unavailable" in text
        assert elapsed < 60, elapsed
        assert not any(alive(pid) for pid in pids.values())
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)


def test_tfrecord_with_3_files_on_2_workers_shards_by_file(tmp_path: Path):
    from helpers import learnable_arrays

    from kdist.data.tfrecords import write_tfrecords

    x, y = learnable_arrays(360, shape=(8, 8, 1))
    root = write_tfrecords(
        tmp_path / "records",
        {"train": (x[:300], y[:300]), "validation": (x[300:], y[300:])},
        num_shards={"train": 3, "validation": 1},
    )
    log = io.StringIO()
    code = run(
        2,
        [
            "strategy=multi_worker_mirrored",
            "data=tfrecord",
            f"data.source.path={root}",
            "data.shard_policy=file",
            "trainer.epochs=3",
            "trainer.global_batch_size=32",
            "trainer.verbose=0",
            "callbacks=minimal",
        ],
        run_dir=tmp_path / "run",
        timeout=300,
        output=log,
    )
    text = log.getvalue()
    assert code == 0, text[-3000:]
    reads = dict(
        re.findall(
            r"\[(worker \d)\] .*train data: input pipeline \d of 2 reads (\d file\(s\): .*)", text
        )
    )
    assert set(reads) == {"worker 0", "worker 1"}, text[-3000:]
    files = {w: set(r.split(": ", 1)[1].split(", ")) for w, r in reads.items()}
    assert len(files["worker 0"]) == 2 and len(files["worker 1"]) == 1
    assert not files["worker 0"] & files["worker 1"]
    assert len(files["worker 0"] | files["worker 1"]) == 3
    accuracy = json.loads((tmp_path / "run" / "metrics.json").read_text())["validation"]["accuracy"]
    assert accuracy > 0.5
