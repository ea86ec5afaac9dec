"""The parameter-server Kubernetes and SLURM recipes give every task a TF_CONFIG kdist accepts."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml
from helpers import REPO, compose

from kdist.cluster import parse_tf_config
from kdist.config.validate import validate

CLUSTER = REPO / "recipes" / "cluster"


def _overrides(command: str) -> list[str]:
    words = shlex.split(command)
    start = words.index("kdist.train") + 1
    return [w for w in words[start:] if not w.startswith("hydra.")]


def test_kubernetes_jobs_give_every_pod_a_valid_tf_config():
    docs = list(yaml.safe_load_all((CLUSTER / "kubernetes-ps.yaml").read_text()))
    (service,) = [d for d in docs if d["kind"] == "Service"]
    jobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Job"}
    roles = {"kdist-chief": "chief", "kdist-worker": "worker", "kdist-ps": "ps"}
    assert set(jobs) == set(roles)
    port = service["spec"]["ports"][0]["port"]
    clusters = []
    for name, job in jobs.items():
        spec = job["spec"]
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        script = container["args"][0]
        export = next(line for line in script.splitlines() if "TF_CONFIG" in line)
        run_line = next(line for line in script.splitlines() if line.strip().startswith("exec"))
        assert spec["completionMode"] == "Indexed"
        assert spec["parallelism"] == spec["completions"]
        # The headless Service selects every pod and gives it <job>-<i>.<subdomain>.
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        assert pod["subdomain"] == service["metadata"]["name"]
        assert container["ports"][0]["containerPort"] == port
        for index in range(spec["completions"]):
            result = subprocess.run(
                ["sh", "-c", f'{export}\nprintf "%s" "$TF_CONFIG"'],
                env={**os.environ, "JOB_COMPLETION_INDEX": str(index)},
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            )
            info = parse_tf_config(result.stdout)
            assert (info.task_type, info.task_index) == (roles[name], index)
            assert info.cluster[roles[name]][index] == f"{name}-{index}.{pod['subdomain']}:{port}"
            clusters.append(json.dumps(dict(info.cluster), sort_keys=True))
        if roles[name] == "chief":
            cfg = compose(_overrides(run_line))
            validate(cfg)
            assert cfg.strategy._target_ == "kdist.strategies.parameter_server"
            assert cfg.strategy.min_shard_bytes
        else:
            assert run_line.split() == ["exec", "python", "-m", "kdist.server"]
            # A failed server comes back; the chief reconnects to it.
            assert pod["restartPolicy"] == "OnFailure"
    assert len(set(clusters)) == 1  # every pod describes the same cluster
    sizes = {job: len(a) for job, a in json.loads(clusters[0]).items()}
    assert sizes == {"chief": 1, "worker": jobs["kdist-worker"]["spec"]["completions"], "ps": 2}


def _fake_slurm(bin_dir: Path, hosts: list[str]) -> None:
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf '%s\\n' " + " ".join(hosts) + "\n")
    # srun: run each task of the step in turn with its SLURM_PROCID. It ignores SIGTERM
    # so the script's "stop the servers" step does not cut the dry run short.
    (bin_dir / "srun").write_text(
        "#!/bin/bash\ntrap '' TERM\nntasks=1\n"
        "while [[ $1 == --* ]]; do case $1 in --ntasks=*) ntasks=${1#*=};; esac; shift; done\n"
        'for ((i=0; i<ntasks; i++)); do SLURM_PROCID=$i "$@"; done\n'
    )
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)


def _dry_run(tmp_path: Path, hosts: list[str], **env: str) -> subprocess.CompletedProcess:
    _fake_slurm(tmp_path / "bin", hosts)
    return subprocess.run(
        ["bash", str(CLUSTER / "slurm-ps.sbatch")],
        env={
            **os.environ,
            "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "SLURM_JOB_ID": "12",
            "SLURM_JOB_NODELIST": "node[1-9]",
            "SLURM_JOB_NUM_NODES": str(len(hosts)),
            "KDIST_DRY_RUN": "1",
            **env,
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_slurm_script_gives_each_node_its_role(tmp_path: Path):
    text = (CLUSTER / "slurm-ps.sbatch").read_text()
    assert "#SBATCH --nodes=4" in text and "#SBATCH --ntasks-per-node=1" in text
    hosts = ["node1", "node2", "node3", "node4", "node5"]
    result = _dry_run(tmp_path, hosts, KDIST_NUM_PS="2")
    assert result.returncode == 0, result.stderr
    tasks = {key: (info, command) for key, (info, command, _) in _tasks(result).items()}
    assert set(tasks) == {("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)}
    cluster = tasks[("chief", 0)][0].cluster
    assert cluster == {
        "chief": ["node1:8888"],
        "ps": ["node2:8888", "node3:8888"],
        "worker": ["node4:8888", "node5:8888"],
    }
    assert all(info.cluster == cluster for info, _ in tasks.values())
    chief_command = tasks[("chief", 0)][1]
    assert "hydra.run.dir=outputs/slurm-ps-12" in chief_command
    cfg = compose(_overrides(chief_command))
    validate(cfg)
    assert cfg.strategy.cluster == "tf_config"
    for key, (_, command) in tasks.items():
        if key[0] != "chief":
            assert command == "python -m kdist.server"


def _tasks(result: subprocess.CompletedProcess) -> dict[tuple[str, int], tuple[Any, str, str]]:
    """(task type, index) -> (its TF_CONFIG, its command, its CUDA_VISIBLE_DEVICES)."""
    tasks = {}
    for line in result.stdout.splitlines():
        gpus, rest = line.removeprefix("GPUS=").split(" TF_CONFIG=", 1)
        config, command = rest.split(" COMMAND=")
        info = parse_tf_config(config)
        tasks[(info.task_type, info.task_index)] = (info, command, gpus)
    return tasks


def test_slurm_parameter_servers_hide_the_gpus_of_their_task(tmp_path: Path):
    hosts = ["node1", "node2", "node3", "node4"]
    given = _tasks(_dry_run(tmp_path, hosts, CUDA_VISIBLE_DEVICES="0,1"))
    assert {key: gpus for key, (_, _, gpus) in given.items()} == {
        ("chief", 0): "0,1",
        ("ps", 0): "",
        ("worker", 0): "0,1",
        ("worker", 1): "0,1",
    }
    again = tmp_path / "again"
    again.mkdir()
    asked = _tasks(_dry_run(again, hosts, CUDA_VISIBLE_DEVICES="0,1", KDIST_PS_GPUS="1"))
    assert asked[("ps", 0)][2] == "0,1"


def test_slurm_script_needs_enough_nodes(tmp_path: Path):
    result = _dry_run(tmp_path, ["node1", "node2", "node3"], KDIST_NUM_PS="2")
    assert result.returncode == 2
    assert "slurm-ps needs at least 4 nodes (chief, 2 ps, 1 worker)" in result.stderr


def test_ps_recipes_are_valid_bash_and_yaml():
    subprocess.run(["bash", "-n", str(CLUSTER / "slurm-ps.sbatch")], check=True, timeout=30)
    assert len(list(yaml.safe_load_all((CLUSTER / "kubernetes-ps.yaml").read_text()))) == 4
