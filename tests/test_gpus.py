"""`kdist.launch` gives each task its GPUs through CUDA_VISIBLE_DEVICES; checked without GPUs.

The planning functions are tested on 4 fake GPU ids; one cheap launch (two tiny Python
tasks, no TensorFlow) checks that the tasks really get that environment.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import alive, launch_pids

from kdist.config.errors import ConfigError
from kdist.launch import run
from kdist.launcher.gpus import ALLOW_GROWTH, detect_gpus, plan_gpus
from kdist.launcher.tasks import plan_tasks as _plan

FOUR = ["0", "1", "2", "3"]


def _visible(tasks) -> dict[tuple[str, int], str | None]:
    return {(t.role, t.index): t.env.get("CUDA_VISIBLE_DEVICES") for t in tasks}


def test_two_workers_on_four_gpus_round_robin(tmp_path: Path):
    devices = plan_gpus(gpu_ids=FOUR, workers=2)
    assert devices == {("worker", 0): "0,2", ("worker", 1): "1,3"}
    tasks = _plan(
        workers=2,
        ps=0,
        module="kdist.train",
        overrides=[],
        host="127.0.0.1",
        run_dir=tmp_path,
        base_env={"PATH": "/bin"},
        devices=devices,
    )
    assert _visible(tasks) == {("worker", 0): "0,2", ("worker", 1): "1,3"}
    assert [json.loads(t.env["TF_CONFIG"])["task"]["index"] for t in tasks] == [0, 1]


def test_two_workers_on_four_gpus_two_each(tmp_path: Path):
    devices = plan_gpus(gpu_ids=FOUR, workers=2, gpus_per_worker=2)
    assert devices == {("worker", 0): "0,1", ("worker", 1): "2,3"}


def test_parameter_servers_chief_and_evaluator_get_no_gpu_unless_asked(tmp_path: Path):
    devices = plan_gpus(gpu_ids=FOUR, workers=2, ps=1, evaluator=True)
    tasks = _plan(
        workers=2,
        ps=1,
        module="kdist.train",
        overrides=[],
        host="127.0.0.1",
        run_dir=tmp_path,
        base_env={"PATH": "/bin"},
        devices=devices,
    )
    assert _visible(tasks) == {
        ("ps", 0): "",
        ("worker", 0): "0,2",
        ("worker", 1): "1,3",
        ("chief", 0): "",
    }
    assert devices[("evaluator", 0)] == ""
    asked = plan_gpus(gpu_ids=FOUR, workers=2, ps=1, ps_gpus=1)
    assert asked[("ps", 0)] == "3"
    assert (asked[("worker", 0)], asked[("worker", 1)]) == ("0,2", "1")


def test_more_workers_than_gpus_share_them():
    assert plan_gpus(gpu_ids=["0", "1"], workers=3) == {
        ("worker", 0): "0",
        ("worker", 1): "1",
        ("worker", 2): "0",
    }


def test_no_gpus_leaves_the_environment_alone():
    assert plan_gpus(gpu_ids=[], workers=2, ps=1) == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"gpus_per_worker": 3},
            "--gpus-per-worker=3: asks for 6 GPU(s) (3 x --workers 2) but 4 are available",
        ),
        ({"gpus_per_worker": 0}, "--gpus-per-worker=0: must be an integer >= 1"),
        ({"ps": 1, "ps_gpus": 5}, "--ps-gpus=5: asks for 5 GPU(s) (5 x --ps 1) but 4"),
        ({"ps_gpus": 1}, "--ps-gpus=1: needs parameter servers (--ps N)"),
        ({"ps_gpus": -1}, "--ps-gpus=-1: must be an integer >= 0"),
    ],
)
def test_gpus_asked_that_are_not_there_are_refused(kwargs, message):
    with pytest.raises(ConfigError) as raised:
        plan_gpus(gpu_ids=FOUR, workers=2, **kwargs)
    assert str(raised.value).startswith(message)


def test_detection_reads_cuda_visible_devices_then_nvidia_smi(tmp_path: Path, monkeypatch):
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "1,-1,2"}) == ["1"]
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "4,5,6"}, gpus=2) == ["4", "5"]
    with pytest.raises(ConfigError, match=r"^--gpus=3: is more than the 2 GPU"):
        detect_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, gpus=3)
    assert detect_gpus({}, gpus=4) == FOUR
    tool = tmp_path / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\necho 'GPU 0: Fake (UUID: GPU-a)'\necho 'GPU 1: Fake (UUID: GPU-b)'\n"
    )
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert detect_gpus({}) == ["0", "1"]


def test_cli_refuses_more_gpus_than_exist_with_one_line(tmp_path: Path):
    args = ["--workers", "2", "--gpus", "4", "--gpus-per-worker", "3"]
    result = subprocess.run(
        [sys.executable, "-m", "kdist.launch", *args, "--", "strategy=multi_worker_mirrored"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"},
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "kdist: config error: --gpus-per-worker=3: asks for 6 GPU(s) (3 x --workers 2) but 4 "
        "are available; ask for fewer, or state the machine's count with --gpus N"
    )


def test_launched_tasks_see_their_gpus_and_memory_growth(tmp_path: Path, monkeypatch):
    (tmp_path / "showgpus.py").write_text(
        "import json, os\n"
        "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
        "print('gpus', index, repr(os.environ.get('CUDA_VISIBLE_DEVICES')),"
        f" os.environ.get({ALLOW_GROWTH!r}), flush=True)\n"
    )
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    log = io.StringIO()
    code = run(
        2,
        [],
        module="showgpus",
        run_dir=tmp_path / "r",
        output=log,
        timeout=120,
        grace_seconds=2,
        gpus=4,
        gpus_per_worker=2,
    )
    text = log.getvalue()
    assert code == 0, text
    assert "[worker 0] gpus 0 '0,1' true" in text
    assert "[worker 1] gpus 1 '2,3' true" in text
    assert not any(alive(pid) for pid in launch_pids(text).values())


def test_kdist_server_enables_memory_growth_before_starting(monkeypatch):
    import tensorflow as tf

    import kdist.server
    from kdist.cluster import parse_tf_config

    calls: list[str] = []
    monkeypatch.setattr(kdist.server, "enable_memory_growth", lambda: calls.append("growth"))
    monkeypatch.setattr(tf.distribute, "Server", lambda *a, **k: calls.append("server"))
    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}
    info = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}}))
    kdist.server.start_server(info)
    assert calls == ["growth", "server"]
