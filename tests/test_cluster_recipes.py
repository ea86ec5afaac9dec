"""The Kubernetes and SLURM recipes produce a cluster description kdist accepts."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import yaml
from helpers import REPO, compose

from kdist.cluster import parse_tf_config, resolve

CLUSTER = REPO / "recipes" / "cluster"


def _kdist_overrides(command: str) -> list[str]:
    words = shlex.split(command)
    start = words.index("kdist.train") + 1
    return [w for w in words[start:] if not w.startswith("hydra.")]


def test_kubernetes_indexed_job_gives_each_pod_a_valid_tf_config():
    docs = list(yaml.safe_load_all((CLUSTER / "kubernetes-multiworker.yaml").read_text()))
    service = next(d for d in docs if d["kind"] == "Service")
    job = next(d for d in docs if d["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    script = container["args"][0]
    export = next(line for line in script.splitlines() if "TF_CONFIG" in line)
    workers = job["spec"]["completions"]
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["parallelism"] == workers
    for index in range(workers):
        result = subprocess.run(
            ["sh", "-c", f'{export}\nprintf "%s" "$TF_CONFIG"'],
            env={**os.environ, "JOB_COMPLETION_INDEX": str(index)},
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        info = parse_tf_config(result.stdout)
        assert (info.task_type, info.task_index) == ("worker", index)
        assert info.num_workers == workers
        host, port = info.cluster["worker"][index].split(":")
        # Pod DNS name: <job>-<index>.<subdomain> on the Service's port.
        assert host == f"{job['metadata']['name']}-{index}.{pod['subdomain']}"
        assert pod["subdomain"] == service["metadata"]["name"]
        assert int(port) == service["spec"]["ports"][0]["port"]
        assert int(port) == container["ports"][0]["containerPort"]
    run_line = next(line for line in script.splitlines() if "kdist.train" in line)
    cfg = compose(_kdist_overrides(run_line))
    assert cfg.strategy._target_ == "kdist.strategies.multi_worker_mirrored"


def test_slurm_script_resolves_a_two_node_cluster():
    text = (CLUSTER / "slurm-multiworker.sbatch").read_text()
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=1" in text
    command = " ".join(
        line.rstrip("\\").strip() for line in text.split("srun", 1)[1].splitlines() if line.strip()
    )
    cfg = compose(_kdist_overrides("srun" + command))
    assert cfg.strategy.cluster == "slurm"
    for rank in range(2):
        env = {
            "SLURM_JOB_ID": "12",
            "SLURM_PROCID": str(rank),
            "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_STEP_NODELIST": "node[1-2]",
            "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
        }
        info = resolve(env, mode=cfg.strategy.cluster, port_base=cfg.strategy.port_base)
        assert info.cluster == {"worker": ["node1:8888", "node2:8888"]}
        assert info.task_index == rank and info.is_chief == (rank == 0)


def test_sbatch_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(CLUSTER / "slurm-multiworker.sbatch")], check=True)


def test_recipes_are_yaml(tmp_path: Path):
    for path in CLUSTER.glob("*.yaml"):
        assert list(yaml.safe_load_all(path.read_text()))
