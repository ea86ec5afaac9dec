"""The time split's arithmetic (`benchmarks.time_split`) on synthetic timestamps."""

from __future__ import annotations

import pytest

from benchmarks.time_split import exclusive, pooled, split_workers


def test_nested_calls_count_once_for_the_innermost():
    events = [
        ("callbacks", 10.0, 14.0),  # a batch-end hook holding a 1 s conversion
        ("read", 10.0, 11.0),
        ("step", 0.0, 9.0),
        ("read", 15.0, 20.0),  # the epoch's end, holding an average
        ("average", 16.0, 19.0),
    ]
    own = {(c, s): seconds for c, s, _, seconds in exclusive(events)}
    assert own == {
        ("step", 0.0): 9.0,
        ("callbacks", 10.0): 3.0,
        ("read", 10.0): 1.0,
        ("read", 15.0): 2.0,
        ("average", 16.0): 3.0,
    }


def test_split_of_two_workers_with_a_wait_in_the_average():
    # Worker 1 reaches the average 2 s later; the all-reduce ends at 14 on both.
    fast = {
        "window": [0.0, 20.0],
        "events": [
            ("callbacks", 0.0, 1.0),
            ("step", 1.0, 9.0),
            ("average", 9.0, 14.0),
            ("step", 14.0, 19.0),
            ("read", 19.0, 19.5),
        ],
    }
    slow = {
        "window": [0.0, 20.0],
        "events": [
            ("callbacks", 0.0, 1.0),
            ("step", 1.0, 11.0),
            ("average", 11.0, 14.0),
            ("step", 14.0, 19.5),
            ("read", 19.5, 19.75),
        ],
    }
    split = split_workers({"worker-0": fast, "worker-1": slow})
    a, b = split["worker-0"], split["worker-1"]
    assert a["step"] == pytest.approx(13.0) and b["step"] == pytest.approx(15.5)
    assert a["average"] == pytest.approx(5.0) and a["average_calls"] == 1
    # The fast worker's average is 2 s longer than the same call on the other worker.
    assert a["average_beyond_fastest"] == pytest.approx(2.0)
    assert b["average_beyond_fastest"] == pytest.approx(0.0)
    # The n-th step calls are matched: (8 vs 10) and (5 vs 5.5).
    assert a["step_beyond_fastest"] == pytest.approx(0.0)
    assert b["step_beyond_fastest"] == pytest.approx(2.5)
    assert a["read_beyond_fastest"] == pytest.approx(0.25)
    assert a["other"] == pytest.approx(20.0 - 13.0 - 5.0 - 0.5 - 1.0)
    assert a["outside_steps_share"] == pytest.approx(1 - 13.0 / 20.0)


def test_one_process_has_no_wait_and_rounds_pool_by_their_walls():
    one = {"window": [0.0, 10.0], "events": [("step", 0.0, 9.0), ("callbacks", 9.0, 9.5)]}
    two = {"window": [0.0, 30.0], "events": [("step", 0.0, 24.0)]}
    first = split_workers({"single-0": one})["single-0"]
    assert first["step_beyond_fastest"] == 0.0 and first["average_calls"] == 0
    whole = pooled([first, split_workers({"single-0": two})["single-0"]])
    assert whole["wall"] == pytest.approx(40.0)
    assert whole["step_share"] == pytest.approx(33.0 / 40.0)
    assert whole["outside_steps_share"] == pytest.approx(7.0 / 40.0)
    assert whole["other_share"] == pytest.approx(6.5 / 40.0)


def test_a_command_runs_on_the_cores_it_is_given(tmp_path):
    import os

    from benchmarks.processes import run_command

    core = sorted(os.sched_getaffinity(0))[-1]
    done = run_command(
        ["-c", "import os; print(sorted(os.sched_getaffinity(0)))"], cwd=tmp_path, cpus=[core]
    )
    assert done.status == 0 and done.output.strip() == f"[{core}]"


def test_the_apart_row_runs_both_halves_at_once_and_sums_them(tmp_path, monkeypatch):
    import threading

    from benchmarks import time_split
    from benchmarks.processes import Finished

    both = threading.Barrier(2, timeout=60)  # broken if the two ran one after the other
    calls = []

    def one_process(work, tag, *, cpus, batch, steps, timeout, lone_port=None):
        assert lone_port is None
        calls.append((tag, list(cpus), batch))
        both.wait()
        seconds = {"apart-0": 2.0, "apart-1": 4.0}[tag]
        epochs = [
            ("epoch", {"steps": str(steps), "batch": str(batch), "seconds": str(s)})
            for s in (9.0, seconds)
        ]
        return Finished(0, "", 1.0, 0.0, epochs)

    monkeypatch.setattr(time_split, "_one_process", one_process)
    monkeypatch.setattr(time_split, "_read_split", lambda folder: {"single-0": {"wall": 1.0}})
    row = time_split.apart_row(tmp_path, "apart", cpus=[0, 1], batch=32, steps=8)
    assert sorted(calls) == [("apart-0", [0], 16), ("apart-1", [1], 16)]
    assert row["examples_per_sec"] == 8 * 16 / 2.0 + 8 * 16 / 4.0  # exact in binary
    assert sorted(row["split"]) == ["apart-0", "apart-1"]


def test_lone_workers_are_each_the_one_worker_of_a_cluster_on_its_own_port(tmp_path, monkeypatch):
    import json

    from benchmarks import processes, time_split
    from benchmarks.processes import Finished

    commands = []

    def run_command(args, *, cwd, timeout, cpus, env=None):
        commands.append((list(args), list(cpus), dict(env or {})))
        epochs = [("epoch", {"steps": "8", "batch": "16", "seconds": "2.0"})] * 2
        return Finished(0, "", 1.0, 0.0, epochs)

    monkeypatch.setattr(processes, "run_command", run_command)
    # both processes name their task worker-0: the row tells them apart by their index
    monkeypatch.setattr(time_split, "_read_split", lambda folder: {"worker-0": {"wall": 1.0}})
    row = time_split.apart_row(tmp_path, "lone", cpus=[0, 1], batch=32, steps=8, lone=True)
    assert sorted(row["split"]) == ["apart-0", "apart-1"]
    ports = set()
    for args, _cpus, env in commands:
        assert "strategy=multi_worker_mirrored" in args
        assert "strategy.sync.mode=local_sgd" in args
        tf_config = json.loads(env["TF_CONFIG"])
        assert tf_config["task"] == {"type": "worker", "index": 0}
        (address,) = tf_config["cluster"]["worker"]
        ports.add(address)
    assert len(ports) == 2, "each process is a cluster of its own, on its own port"
    assert sorted(cpus for _, cpus, _ in commands) == [[0], [1]]


def test_cpu_between_counts_each_kind_and_threads_that_started_between():
    from benchmarks.probes import cpu_between

    before = {"1": ("main", 1.0), "2": ("compute", 5.0), "3": ("other", 0.5)}
    after = {"1": ("main", 1.25), "2": ("compute", 7.0), "4": ("compute", 0.5)}  # 3 ended
    assert cpu_between(before, after) == {"main": 0.25, "compute": 2.5, "other": 0.0}


def test_the_main_thread_s_cpu_is_read_as_main():
    import os
    import time

    from benchmarks.probes import cpu_between, thread_cpu

    if not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc on this system")  # the benchmarks read Linux's /proc
    before = thread_cpu()
    assert before[str(os.getpid())][0] == "main"
    started = time.thread_time()
    while time.thread_time() - started < 0.3:  # this thread's CPU, whatever the machine's speed
        pass
    spent = cpu_between(before, thread_cpu())
    assert spent["main"] >= 0.2  # 0.3 s of CPU, read in clock ticks (0.01 s)
