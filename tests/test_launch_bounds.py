"""`kdist.launch --workers N`: refused in one line, before any task starts, when the machine
cannot hold the tasks or the global batch cannot split over the replicas (issue 38, BAD 5)."""

from __future__ import annotations

import pytest

from kdist import launch
from kdist.config.errors import ConfigError
from kdist.launcher.checks import MEMORY_PER_TASK, check_cluster_size, machine_bound


def test_the_bound_is_the_lower_of_cores_and_memory():
    assert machine_bound(cores=16, memory=64 * 2**30) == (
        64,
        "16 cores at 4 TensorFlow tasks a core",
    )
    count, why = machine_bound(cores=16, memory=4 * 2**30)  # the 4 GB cgroup
    assert count == 4 * 2**30 // MEMORY_PER_TASK == 8 and "4.0 GiB of memory" in why
    assert machine_bound(cores=1, memory=1)[0] == 1


def test_too_many_workers_for_the_machine_name_workers_and_the_bound():
    with pytest.raises(ConfigError) as refused:
        check_cluster_size(None, workers=1000, ps=0, cores=16, memory=4 * 2**30)
    line = str(refused.value)
    assert line.startswith("--workers=1000: starts 1000 local tasks; this machine holds at most 8")
    assert "use --workers 8 or fewer" in line
    # The chief, parameter servers and the evaluator count too.
    with pytest.raises(ConfigError, match="starts 9 local tasks"):
        check_cluster_size(None, workers=6, ps=1, evaluator=True, cores=16, memory=4 * 2**30)
    check_cluster_size(None, workers=5, ps=1, evaluator=True, cores=16, memory=4 * 2**30)


def test_a_global_batch_that_cannot_split_names_workers():
    overrides = ["strategy=multi_worker_mirrored"]
    with pytest.raises(ConfigError) as refused:
        check_cluster_size(overrides, workers=3, ps=0, cores=64, memory=2**40)
    assert str(refused.value).startswith(
        "--workers=3: gives 3 replicas, which trainer.global_batch_size=64 cannot split evenly"
    )
    with pytest.raises(ConfigError, match="gives 6 replicas"):
        check_cluster_size(
            overrides, workers=3, ps=0, replicas_per_worker=2, cores=64, memory=2**40
        )
    check_cluster_size(overrides, workers=4, ps=0, cores=64, memory=2**40)
    check_cluster_size(
        [*overrides, "trainer.global_batch_size=48"], workers=3, ps=0, cores=64, memory=2**40
    )


def test_the_launcher_refuses_before_starting_any_task(capsys, monkeypatch):
    started: list[object] = []
    monkeypatch.setattr(launch, "supervise", lambda *a, **k: started.append(a) or 0)
    with pytest.raises(SystemExit) as stopped:
        launch.main(["--workers", "100000", "--", "strategy=multi_worker_mirrored"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("kdist: config error: --workers=100000: starts 100000"), err
    assert started == []


def test_ctrl_c_to_the_launcher_is_one_line_and_status_130(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "supervise", interrupted)
    monkeypatch.setattr(launch, "_guardian", lambda *a: type("G", (), {"close": lambda s: None})())
    with pytest.raises(SystemExit) as stopped:
        launch.main(["--workers", "1", "--", "trainer.epochs=1"])
    assert stopped.value.code == 130  # EXIT_INTERRUPTED
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [launch._INTERRUPTED], err
