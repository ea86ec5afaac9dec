"""The SLURM GPU recipe: 4 tasks per node with one GPU each (--gpus-per-task).

SLURM sets each task's CUDA_VISIBLE_DEVICES; kdist's resolver must keep the host:port
layout and leave those devices alone (TensorFlow's SlurmClusterResolver would count the
GPUs with nvidia-smi and reassign them by local rank).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from helpers import REPO, compose

from kdist.cluster import cluster_resolver, resolve
from kdist.config.validate import validate

SCRIPT = REPO / "recipes" / "cluster" / "slurm-multiworker-gpus.sbatch"
STEP = {
    "SLURM_JOB_ID": "12",
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_STEP_NODELIST": "gpu[1-2]",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
    "SLURM_GPUS_PER_TASK": "1",
}


def _overrides() -> list[str]:
    text = SCRIPT.read_text()
    command = " ".join(
        line.rstrip("\\").strip() for line in text.split("srun", 1)[1].splitlines() if line.strip()
    )
    words = shlex.split(command)
    return [w for w in words[words.index("kdist.train") + 1 :] if not w.startswith("hydra.")]


def test_slurm_gpu_script_asks_a_gpu_per_task_and_composes():
    text = SCRIPT.read_text()
    for line in ("--nodes=2", "--ntasks-per-node=4", "--gpus-per-task=1"):
        assert f"#SBATCH {line}" in text
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)
    cfg = compose(_overrides())
    validate(cfg)
    assert cfg.strategy.cluster == "slurm"
    assert cfg.trainer.per_replica_batch_size and cfg.trainer.global_batch_size is None


def test_slurm_gpu_tasks_keep_their_cuda_devices(tmp_path: Path, monkeypatch):
    # nvidia-smi in a task confined to one GPU lists one.
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho 'GPU 0: Fake (UUID: GPU-a)'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    cfg = compose(_overrides())
    for rank in (0, 5):
        env = {**STEP, "SLURM_PROCID": str(rank)}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", str(rank % 4))
        info = resolve(env, mode=cfg.strategy.cluster, port_base=cfg.strategy.port_base)
        expected = [f"gpu{n}:{8888 + i}" for n in (1, 2) for i in range(4)]
        assert info.cluster == {"worker": expected}
        resolver = cluster_resolver(info)
        assert resolver.cluster_spec().as_dict() == {"worker": expected}
        assert (resolver.task_type, resolver.task_id) == ("worker", rank)
        assert os.environ["CUDA_VISIBLE_DEVICES"] == str(rank % 4)
