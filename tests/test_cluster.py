"""Cluster resolution: TF_CONFIG checks and SLURM job steps, before TensorFlow starts."""

from __future__ import annotations

import json

import pytest

from kdist.cluster import (
    ClusterInfo,
    chief_task,
    cluster_resolver,
    is_chief,
    is_chief_task,
    parse_tf_config,
    resolve,
    tf_config_for,
)
from kdist.config import ConfigError

GOOD = {
    "cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]},
    "task": {"type": "worker", "index": 1},
}


def test_valid_tf_config():
    info = parse_tf_config(json.dumps(GOOD))
    assert info.source == "tf_config"
    assert info.task_type == "worker" and info.task_index == 1
    assert info.num_workers == 2
    assert not info.is_chief
    assert parse_tf_config(tf_config_for(GOOD["cluster"], "worker", 0)).is_chief


def test_chief_is_the_chief_task_when_there_is_one():
    config = {
        "cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]},
        "task": {"type": "worker", "index": 0},
    }
    assert not parse_tf_config(json.dumps(config)).is_chief
    config["task"] = {"type": "chief", "index": 0}
    assert parse_tf_config(json.dumps(config)).is_chief


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "TF_CONFIG: is not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (
            json.dumps({"clusters": GOOD["cluster"], "task": GOOD["task"]}),
            "unknown key 'clusters' (valid keys: cluster, task, environment, rpc_layer); "
            "did you mean 'cluster'?",
        ),
        (json.dumps({"task": GOOD["task"]}), "has no 'cluster' mapping"),
        (json.dumps({"cluster": {}, "task": GOOD["task"]}), "has no 'cluster' mapping"),
        (json.dumps({"cluster": {"workers": ["h:1"]}, "task": GOOD["task"]}), "unknown job"),
        (json.dumps({"cluster": {"worker": []}, "task": GOOD["task"]}), "non-empty list"),
        (json.dumps({"cluster": {"worker": ["nohost"]}, "task": GOOD["task"]}), "host:port"),
        (json.dumps({"cluster": {"worker": ["h:99999"]}, "task": GOOD["task"]}), "host:port"),
        (
            json.dumps({"cluster": {"worker": ["h:1", "h:1"]}, "task": GOOD["task"]}),
            "address 'h:1' appears twice (worker 0 and worker 1)",
        ),
        (
            json.dumps({"cluster": {"worker": ["h:1"], "ps": ["h:1"]}, "task": GOOD["task"]}),
            "appears twice",
        ),
        (json.dumps({"cluster": GOOD["cluster"]}), "has no 'task' mapping"),
        (json.dumps({"cluster": GOOD["cluster"], "task": {"index": 0}}), "task.type is missing"),
        (
            json.dumps({"cluster": GOOD["cluster"], "task": {"type": "ps", "index": 0}}),
            "task.type='ps' is not a job of the cluster; use one of: worker",
        ),
        (json.dumps({"cluster": GOOD["cluster"], "task": {"type": "worker"}}), "index is missing"),
        (
            json.dumps({"cluster": GOOD["cluster"], "task": {"type": "worker", "index": 2}}),
            "task.index=2 is out of range for 2 worker task(s); use 0 to 1",
        ),
        (
            json.dumps({"cluster": GOOD["cluster"], "task": {"type": "worker", "index": -1}}),
            "out of range",
        ),
        (
            json.dumps({"cluster": GOOD["cluster"], "task": {"type": "worker", "index": "0"}}),
            "must be an integer",
        ),
        (
            json.dumps({"cluster": GOOD["cluster"], "task": {"type": "worker", "idx": 0}}),
            "task has an unknown key 'idx'",
        ),
        (
            json.dumps(
                {"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}}
            ),
            "a cluster has one chief",
        ),
    ],
)
def test_tf_config_errors(text, message):
    with pytest.raises(ConfigError) as raised:
        parse_tf_config(text)
    assert str(raised.value).startswith("TF_CONFIG: ")
    assert message in str(raised.value)


def test_resolve_prefers_tf_config_and_defaults_to_none():
    assert resolve({}) == ClusterInfo()
    assert resolve({"TF_CONFIG": json.dumps(GOOD)}).task_index == 1
    assert resolve({"TF_CONFIG": "  "}).source == "none"
    assert resolve({"TF_CONFIG": json.dumps(GOOD)}, mode="none").source == "none"
    with pytest.raises(ConfigError, match="TF_CONFIG: is not set"):
        resolve({}, mode="tf_config")
    with pytest.raises(ConfigError, match=r"strategy\.cluster='mpi'"):
        resolve({}, mode="mpi")


SLURM_2_NODES = {
    "SLURM_JOB_ID": "77",
    "SLURM_PROCID": "1",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NODELIST": "gpu-node[07-08]",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
}


def test_slurm_two_node_job():
    info = resolve(SLURM_2_NODES)
    assert info.source == "slurm"
    assert info.cluster == {"worker": ["gpu-node07:8888", "gpu-node08:8888"]}
    assert (info.task_type, info.task_index, info.is_chief) == ("worker", 1, False)
    chief = resolve({**SLURM_2_NODES, "SLURM_PROCID": "0"}, port_base=9000)
    assert chief.is_chief and chief.cluster["worker"][0] == "gpu-node07:9000"


def test_slurm_matches_tensorflows_resolver(monkeypatch):
    for name, value in SLURM_2_NODES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: the CPU-node path
    info = resolve(SLURM_2_NODES)
    resolver = cluster_resolver(info)
    assert resolver.cluster_spec().as_dict() == {"worker": info.cluster["worker"]}
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)


def test_slurm_two_tasks_per_node_get_consecutive_ports():
    env = {**SLURM_2_NODES, "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}
    info = resolve(env)
    assert info.cluster["worker"] == [
        "gpu-node07:8888",
        "gpu-node07:8889",
        "gpu-node08:8888",
        "gpu-node08:8889",
    ]


def test_single_task_slurm_allocation_is_not_a_cluster():
    assert resolve({**SLURM_2_NODES, "SLURM_STEP_NUM_TASKS": "1"}).source == "none"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SLURM_STEP_TASKS_PER_NODE": "1(x3)"}, "SLURM_STEP_TASKS_PER_NODE: gives 3 tasks"),
        ({"SLURM_PROCID": "5"}, "SLURM_PROCID"),
    ],
)
def test_slurm_errors(change, message):
    with pytest.raises(ConfigError, match=message):
        resolve({**SLURM_2_NODES, **change})
    env = dict(SLURM_2_NODES)
    del env["SLURM_STEP_NODELIST"]
    with pytest.raises(ConfigError, match="SLURM_STEP_NODELIST: is not set"):
        resolve(env, mode="slurm")


class _FakeResolver:
    """Just what `kdist.cluster.is_chief` reads from a strategy's cluster resolver."""

    def __init__(self, cluster, task_type, task_id):
        self._cluster = cluster
        self.task_type = task_type
        self.task_id = task_id

    def cluster_spec(self):
        return self

    def as_dict(self):
        return self._cluster


class _FakeStrategy:
    def __init__(self, cluster, task_type, task_id):
        self.cluster_resolver = _FakeResolver(cluster, task_type, task_id)


@pytest.mark.parametrize(
    ("cluster", "task_type", "index", "expected"),
    [
        ({"worker": ["h:1", "h:2"]}, "worker", 0, True),
        ({"worker": ["h:1", "h:2"]}, "worker", 1, False),
        ({"chief": ["h:9"], "worker": ["h:1"]}, "chief", 0, True),
        ({"chief": ["h:9"], "worker": ["h:1"]}, "worker", 0, False),
        ({"chief": ["h:9"], "worker": ["h:1"], "ps": ["h:2"]}, "ps", 0, False),
        ({"worker": ["h:1"], "evaluator": ["h:3"]}, "evaluator", 0, False),
    ],
)
def test_who_is_chief_is_one_rule(cluster, task_type, index, expected):
    """`ClusterInfo.is_chief` (before TensorFlow) and `is_chief(strategy)` (after) agree."""
    assert is_chief_task(task_type, index, cluster) is expected
    info = parse_tf_config(tf_config_for(cluster, task_type, index))
    assert info.is_chief is expected
    assert is_chief(_FakeStrategy(cluster, task_type, index)) is expected
    if expected:
        assert chief_task(cluster) == (task_type, index)


def test_a_process_alone_is_the_chief():
    assert is_chief_task(None, 0, {})
    assert resolve({}).is_chief and is_chief(None) and is_chief(object())
