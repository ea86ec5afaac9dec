"""`kdist.launch` shares the machine's cores out among the workers it starts."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from helpers import alive, launch_pids

import kdist.launcher.tasks
import kdist.server
from kdist.cluster import parse_tf_config
from kdist.launch import run
from kdist.launcher.tasks import (
    INTRA_OP_THREADS,
    PIN_CORES_ENV,
    cores_of_workers,
    plan_tasks,
    threads_per_worker,
)


def _threads(tasks) -> dict[tuple[str, int], str | None]:
    return {(t.role, t.index): t.env.get(INTRA_OP_THREADS) for t in tasks}


def _plan(tmp_path: Path, *, workers: int, ps: int = 0, env: dict[str, str] | None = None):
    return plan_tasks(
        workers=workers,
        ps=ps,
        module="kdist.train",
        overrides=[],
        host="127.0.0.1",
        run_dir=tmp_path,
        base_env={"PATH": "/bin", **(env or {})},
    )


@pytest.mark.parametrize(("cores", "workers", "each"), [(8, 2, 4), (8, 3, 2), (2, 2, 1), (2, 4, 1)])
def test_each_worker_gets_its_share_of_the_cores(tmp_path: Path, monkeypatch, cores, workers, each):
    monkeypatch.setattr(kdist.launcher.tasks, "_cores", lambda: cores)
    tasks = _plan(tmp_path, workers=workers)
    assert _threads(tasks) == {("worker", i): str(each) for i in range(workers)}


def test_parameter_server_workers_share_the_cores_and_the_others_keep_the_default(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setattr(kdist.launcher.tasks, "_cores", lambda: 4)
    tasks = _plan(tmp_path, workers=2, ps=1)
    assert _threads(tasks) == {
        ("ps", 0): None,
        ("worker", 0): "2",
        ("worker", 1): "2",
        ("chief", 0): None,
    }


def test_the_users_setting_wins(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(kdist.launcher.tasks, "_cores", lambda: 8)
    assert threads_per_worker(2, {INTRA_OP_THREADS: "3"}) is None
    tasks = _plan(tmp_path, workers=2, ps=1, env={INTRA_OP_THREADS: "3"})
    assert set(_threads(tasks).values()) == {"3"}


def test_a_parameter_server_worker_applies_the_share(monkeypatch):
    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}
    info = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    monkeypatch.setenv(INTRA_OP_THREADS, "1")
    assert kdist.server.server_config(info).intra_op_parallelism_threads == 1
    monkeypatch.delenv(INTRA_OP_THREADS)
    assert kdist.server.server_config(info).intra_op_parallelism_threads == 0  # TF's default


def test_launched_workers_see_their_share_and_the_launch_says_so(tmp_path: Path, monkeypatch):
    (tmp_path / "showthreads.py").write_text(
        "import json, os\n"
        "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
        f"print('threads', index, os.environ.get({INTRA_OP_THREADS!r}), flush=True)\n"
        "print('cpus', index, sorted(os.sched_getaffinity(0)), flush=True)\n"
    )
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.delenv(INTRA_OP_THREADS, raising=False)
    monkeypatch.setattr(kdist.launcher.tasks, "_cores", lambda: 2)
    cpus = sorted(os.sched_getaffinity(0))
    log = io.StringIO()
    code = run(2, [], module="showthreads", run_dir=tmp_path / "r", output=log, timeout=120)
    text = log.getvalue()
    assert code == 0, text
    assert "[worker 0] threads 0 1" in text and "[worker 1] threads 1 1" in text
    assert "[launch] 1 intra-op thread(s) per worker: the cores shared out" in text
    if len(cpus) >= 2:  # each worker on a core of its own, as the launch line says
        share = len(cpus) // 2
        assert f"[worker 0] cpus 0 {cpus[:share]}" in text, text
        assert f"[worker 1] cpus 1 {cpus[share : 2 * share]}" in text, text
        assert f"on cpus {cpus[0]}" in text
    assert not any(alive(pid) for pid in launch_pids(text).values())


def _cores_by_task(tasks) -> dict[tuple[str, int], tuple[int, ...] | None]:
    return {(t.role, t.index): t.cores for t in tasks}


def test_workers_are_pinned_to_disjoint_shares_of_the_cpus(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(kdist.launcher.tasks, "_cpus", lambda: list(range(16)))
    mwms = _cores_by_task(_plan(tmp_path, workers=2))
    assert mwms == {("worker", 0): tuple(range(8)), ("worker", 1): tuple(range(8, 16))}
    ps = _cores_by_task(_plan(tmp_path, workers=3, ps=2))
    assert ps[("worker", 0)] == (0, 1, 2, 3, 4) and ps[("worker", 2)] == (10, 11, 12, 13, 14)
    assert ps[("chief", 0)] is None and ps[("ps", 0)] is None and ps[("ps", 1)] is None


def test_pinning_can_be_turned_off_and_needs_a_core_per_worker(monkeypatch):
    monkeypatch.setattr(kdist.launcher.tasks, "_cpus", lambda: [0, 1])
    assert cores_of_workers(2, {}) == [(0,), (1,)]
    assert cores_of_workers(2, {PIN_CORES_ENV: "0"}) is None
    assert cores_of_workers(3, {}) is None  # fewer cores than workers: the OS shares them
