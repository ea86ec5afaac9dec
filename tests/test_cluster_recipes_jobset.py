"""The JobSet recipes give every pod a TF_CONFIG kdist accepts.

Each pod's script is run with the environment that pod would get: the container's `env`
(downward-API labels resolved as JobSet sets them) and the Job's JOB_COMPLETION_INDEX.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from typing import Any

import yaml
from helpers import REPO, compose

from kdist.cluster import parse_tf_config
from kdist.config.validate import validate

CLUSTER = REPO / "recipes" / "cluster"
LABEL = re.compile(r"metadata\.labels\['([^']+)'\]")


def _pod_env(jobset: dict, replicated: dict, container: dict, index: int) -> dict[str, str]:
    # The labels JobSet puts on each pod (one Job per replicated job: job index 0).
    labels = {
        "jobset.sigs.k8s.io/jobset-name": jobset["metadata"]["name"],
        "jobset.sigs.k8s.io/replicatedjob-name": replicated["name"],
        "jobset.sigs.k8s.io/job-index": "0",
    }
    env = {"PATH": os.environ["PATH"], "JOB_COMPLETION_INDEX": str(index)}
    for entry in container["env"]:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        else:
            match = LABEL.fullmatch(entry["valueFrom"]["fieldRef"]["fieldPath"])
            assert match, entry
            env[entry["name"]] = labels[match[1]]
    return env


def _tf_config(script: str, env: dict[str, str]) -> str:
    # Everything before the first `exec`/`if` builds TF_CONFIG; then print it.
    lines = []
    for line in script.splitlines():
        if line.startswith(("exec ", "if ")):
            break
        lines.append(line)
    result = subprocess.run(
        ["sh", "-c", "\n".join([*lines, 'printf "%s" "$TF_CONFIG"'])],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return result.stdout


def _run_line(script: str, word: str) -> str:
    return next(line for line in script.splitlines() if word in line and "exec" in line)


def _overrides(command: str) -> list[str]:
    words = shlex.split(command.split(";")[-1])
    return [w for w in words[words.index("kdist.train") + 1 :] if not w.startswith("hydra.")]


def _pods(jobset: dict) -> list[tuple[dict, dict, int, dict[str, Any]]]:
    """(replicated job, container, pod index, TF_CONFIG) of every pod."""
    pods = []
    for replicated in jobset["spec"]["replicatedJobs"]:
        assert replicated["replicas"] == 1  # the hostnames assume job index 0
        job = replicated["template"]["spec"]
        assert job["completionMode"] == "Indexed"
        assert job["parallelism"] == job["completions"]
        (container,) = job["template"]["spec"]["containers"]
        for index in range(job["completions"]):
            env = _pod_env(jobset, replicated, container, index)
            config = _tf_config(container["args"][0], env)
            pods.append((replicated, container, index, config))
    return pods


def _check_common(jobset: dict) -> None:
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert jobset["kind"] == "JobSet"
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] >= 1
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True


def _check_address(jobset: dict, replicated: dict, container: dict, info, index: int) -> None:
    name = jobset["metadata"]["name"]
    port = container["ports"][0]["containerPort"]
    # JobSet's pod hostname and headless Service (named after the JobSet).
    expected = f"{name}-{replicated['name']}-0-{index}.{name}:{port}"
    assert info.cluster[replicated["name"]][index] == expected


def test_jobset_multiworker_gives_each_pod_a_valid_tf_config():
    (jobset,) = yaml.safe_load_all((CLUSTER / "jobset-multiworker.yaml").read_text())
    _check_common(jobset)
    pods = _pods(jobset)
    (replicated,) = jobset["spec"]["replicatedJobs"]
    workers = replicated["template"]["spec"]["completions"]
    assert len(pods) == workers == 2
    for replicated, container, index, config in pods:
        info = parse_tf_config(config)
        assert (info.task_type, info.task_index) == ("worker", index)
        assert info.num_workers == workers
        assert info.is_chief == (index == 0)
        _check_address(jobset, replicated, container, info, index)
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    script = pods[0][1]["args"][0]
    cfg = compose(_overrides(_run_line(script, "kdist.train")))
    validate(cfg)
    assert cfg.strategy._target_ == "kdist.strategies.multi_worker_mirrored"


def test_jobset_ps_gives_every_pod_a_valid_tf_config():
    (jobset,) = yaml.safe_load_all((CLUSTER / "jobset-ps.yaml").read_text())
    _check_common(jobset)
    assert jobset["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief"]}
    replicated_jobs = {r["name"]: r for r in jobset["spec"]["replicatedJobs"]}
    assert set(replicated_jobs) == {"chief", "worker", "ps"}
    pods = _pods(jobset)
    clusters = set()
    for replicated, container, index, config in pods:
        info = parse_tf_config(config)
        assert (info.task_type, info.task_index) == (replicated["name"], index)
        _check_address(jobset, replicated, container, info, index)
        clusters.add(json.dumps(dict(info.cluster), sort_keys=True))
        gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)
        assert gpus == (1 if replicated["name"] == "worker" else 0)
        pod = replicated["template"]["spec"]["template"]["spec"]
        if replicated["name"] != "chief":
            # A failed server comes back in place; the chief reconnects to it.
            assert pod["restartPolicy"] == "OnFailure"
    assert len(clusters) == 1  # every pod describes the same cluster
    sizes = {job: len(a) for job, a in json.loads(clusters.pop()).items()}
    counts = {n: r["template"]["spec"]["completions"] for n, r in replicated_jobs.items()}
    assert sizes == counts == {"chief": 1, "worker": 2, "ps": 2}
    script = pods[0][1]["args"][0]
    assert _run_line(script, "kdist.server").endswith("exec python -m kdist.server; fi")
    cfg = compose(_overrides(_run_line(script, "kdist.train")))
    validate(cfg)
    assert cfg.strategy._target_ == "kdist.strategies.parameter_server"


def test_jobset_scripts_pick_the_program_by_task_type(tmp_path):
    (jobset,) = yaml.safe_load_all((CLUSTER / "jobset-ps.yaml").read_text())
    script = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    script = script["containers"][0]["args"][0]
    # A fake `python` that prints what it was asked to run.
    (tmp_path / "python").write_text('#!/bin/sh\necho "$@"\n')
    (tmp_path / "python").chmod(0o755)
    for task_type, expected in [("chief", "-m kdist.train"), ("ps", "-m kdist.server")]:
        result = subprocess.run(
            ["sh", "-c", script],
            env={
                "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
                "JOBSET_NAME": "kdist-ps",
                "KDIST_TASK_TYPE": task_type,
                "KDIST_NUM_WORKERS": "2",
                "KDIST_NUM_PS": "2",
                "KDIST_PORT": "2222",
                "JOB_COMPLETION_INDEX": "0",
            },
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        assert result.stdout.startswith(expected), result.stdout
