"""A multirun's Hydra launcher checked and bounded before any job starts
(`kdist.launcher.sweep_launchers`); a job's lines prefixed and quiet (`kdist.runs.job_output`);
a job named by what it sweeps (`kdist.runs.sweep_board`).

Cost: the command-line cases stop before TensorFlow is imported (about 3 s each); the rest
runs in this process. The sweeps themselves are in tests/test_launchers.py and
tests/test_multirun.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from helpers import run_module

from kdist.config.errors import ConfigError
from kdist.launcher.sweep_launchers import check_launcher, sweep_jobs, sweep_launcher_overrides
from kdist.process.exit_codes import EXIT_CONFIG_ERROR
from kdist.runs.job_output import LinePrefixer
from kdist.runs.sweep_board import job_label, link_job_board, swept_keys

JOBLIB = {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"}
LOCAL = {
    "_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
    "timeout_min": 60,
    "nodes": 1,
    "tasks_per_node": 1,
}
BASIC = {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None}
GiB = 2**30


@pytest.mark.parametrize(
    ("args", "key", "says"),
    [
        (
            ["hydra/launcher=joblib", "hydra.launcher.n_jobs=0"],
            "hydra.launcher.n_jobs=0",
            "at least 1",
        ),
        (
            ["hydra/launcher=joblib", "hydra.launcher.n_jobs=two"],
            "hydra.launcher.n_jobs='two'",
            "must be a whole number",
        ),
        (
            ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=abc"],
            "hydra.launcher.timeout_min='abc'",
            "must be a whole number",
        ),
        (
            ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=-1"],
            "hydra.launcher.timeout_min=-1",
            "must be at least 1",
        ),
        (
            ["hydra/launcher=submitit_slurm"],
            "hydra/launcher=submitit_slurm",
            "SLURM is not available here (no sbatch command",
        ),
    ],
)
def test_a_bad_launcher_is_one_line_before_any_job(tmp_path: Path, args, key, says):
    sweep = tmp_path / "sweep"
    done = run_module(
        "kdist.train",
        ["-m", *args, "optimizer.learning_rate=1e-3,3e-3", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
        timeout=120,
        # No sbatch here, whatever the machine running the tests has.
        env={"PATH": str(tmp_path)},
    )
    assert done.returncode == EXIT_CONFIG_ERROR, done.stderr[-3000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"kdist: config error: {key}: ") and says in line
    assert not sweep.exists()  # no job was started, no sweep folder made
    if "submitit_slurm" in args[0]:
        assert "use hydra/launcher=submitit_local or hydra/launcher=joblib" in line


def test_joblib_n_jobs_is_bounded_by_the_jobs_and_the_machine():
    said: list[str] = []
    kwargs = {"cores": 2, "memory": 64 * GiB, "say": said.append}
    huge = {**JOBLIB, "n_jobs": 10000}
    # A 2-core machine holds 8 TensorFlow processes (as `kdist launch --workers`).
    assert check_launcher(huge, jobs=None, **kwargs) == {"hydra.launcher.n_jobs": 8}
    assert said[-1].startswith("hydra.launcher.n_jobs=10000: runs 8 job(s) at a time")
    assert check_launcher(huge, jobs=2, **kwargs) == {"hydra.launcher.n_jobs": 2}
    assert "(the sweep has 2 job(s))" in said[-1]
    # Memory bounds too: 1 GiB holds 2 processes of 0.5 GiB.
    assert check_launcher(huge, jobs=50, cores=2, memory=GiB, say=said.append) == {
        "hydra.launcher.n_jobs": 2
    }
    # joblib's negative counts (all cores but ...) are made explicit; a fitting count stays.
    assert check_launcher({**JOBLIB, "n_jobs": -1}, jobs=4, **kwargs) == {
        "hydra.launcher.n_jobs": 2
    }
    count = len(said)
    assert check_launcher({**JOBLIB, "n_jobs": 2}, jobs=4, **kwargs) == {}
    assert len(said) == count  # nothing to say
    with pytest.raises(ConfigError, match=r"hydra.launcher.n_jobs=0: must be at least 1"):
        check_launcher({**JOBLIB, "n_jobs": 0}, jobs=2, **kwargs)


def test_submitit_local_tasks_must_fit_the_machine_and_jobs_run_in_batches():
    said: list[str] = []
    kwargs = {"cores": 2, "memory": 64 * GiB, "say": said.append}
    with pytest.raises(ConfigError, match=r"hydra.launcher.tasks_per_node=9: starts 9"):
        check_launcher({**LOCAL, "tasks_per_node": 9}, jobs=1, **kwargs)
    with pytest.raises(ConfigError, match=r"hydra.launcher.nodes=2: submitit_local runs"):
        check_launcher({**LOCAL, "nodes": 2}, jobs=1, **kwargs)
    assert check_launcher({**LOCAL, "tasks_per_node": 2}, jobs=3, **kwargs) == {}
    # 10 jobs of 2 tasks: 4 jobs (8 processes) at a time, said in one line.
    assert check_launcher({**LOCAL, "tasks_per_node": 2}, jobs=10, **kwargs) == {
        "hydra.sweeper.max_batch_size": 4
    }
    assert said == [
        "hydra/launcher=submitit_local: runs the 10 jobs 4 at a time (2 process(es) each; "
        "this machine holds 8 TensorFlow processes: 2 cores at 4 TensorFlow tasks a core)"
    ]
    for key, value in (("gpus_per_node", -1), ("mem_gb", 0), ("cpus_per_task", "x")):
        with pytest.raises(ConfigError, match=f"hydra.launcher.{key}="):
            check_launcher({**LOCAL, key: value}, jobs=1, **kwargs)
    assert check_launcher({**LOCAL, "gpus_per_node": None, "mem_gb": None}, jobs=1, **kwargs) == {}


def test_the_sweeps_jobs_are_counted_as_the_basic_sweeper_makes_them():
    assert sweep_jobs(["a=1,2", "b=range(3)", "c=x"], BASIC) == 6
    assert sweep_jobs(["c=x"], {**BASIC, "params": {"a": "1,2,3"}}) == 3
    assert sweep_jobs(["model=glob(*)"], BASIC) is None  # known once composed
    assert sweep_jobs(["a=1,2"], {"_target_": "optuna.Sweeper"}) is None


def test_the_bound_reaches_the_command_line():
    argv = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=10000", "a=1,2"]
    assert sweep_launcher_overrides(argv) == ["hydra.launcher.n_jobs=2"]
    assert sweep_launcher_overrides(argv[2:]) == []  # a single run has no launcher


def test_a_jobs_lines_carry_the_job_and_tensorflows_start_up_lines_are_dropped(capfd):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # what `kdist train` sets
    prefixer = LinePrefixer("[job 3] ")
    prefixer.start()
    try:
        os.write(1, b"Epoch 1/2 - 5/5 steps\n")
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are ")
        os.write(2, b"written to STDERR\nI0000 00:00:1795817462.105233    8755 port.cc:153] ")
        os.write(2, b"oneDNN custom operations are on.\nI0000 00:00:1.2    8755 cudart_stub.cc")
        os.write(2, b":31] Could not find cuda drivers on your machine\nE0000 00:00:1.3  8755 ")
        os.write(2, b"cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)\n")
        os.write(2, b"a real error\nno newline at the end")
    finally:
        prefixer.stop()
    out, err = capfd.readouterr()
    assert out == "[job 3] Epoch 1/2 - 5/5 steps\n"
    assert err == "[job 3] a real error\n[job 3] no newline at the end\n"
    os.write(1, b"after\n")  # the descriptors are the process's own again
    assert capfd.readouterr().out == "after\n"


def test_a_job_is_named_by_what_the_sweep_varies(tmp_path: Path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    saved = {
        "hydra": {
            "overrides": {"task": ["optimizer.learning_rate=1e-3,3e-3", "trainer=fast_dev"]},
            "sweeper": {"params": {"model": "mlp,cnn"}},
        }
    }
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(saved))
    swept = swept_keys(sweep)
    assert swept == {"optimizer.learning_rate", "model"}
    job = ["trainer=fast_dev", "optimizer.learning_rate=0.003", "model=cnn"]
    assert job_label(job, swept=swept, num=1) == "model=cnn,optimizer.learning_rate=0.003"
    assert job_label(["trainer=fast_dev"], swept=swept, num=4) == "job_4"
    assert job_label(["data.path=/a/b"], swept=None, num=0) == "data.path=_a_b"
    assert swept_keys(tmp_path) is None  # no multirun.yaml
    # The job's tensorboard/ linked into the sweep's board under that name, relatively.
    (sweep / "1" / "tensorboard").mkdir(parents=True)
    link = link_job_board(sweep, sweep / "1", "model=cnn")
    assert link == sweep / "tensorboard" / "model=cnn"
    assert os.readlink(link) == os.path.join("..", "1", "tensorboard")
    assert link_job_board(sweep, sweep / "1", "model=cnn") == link  # made once
    (sweep / "2" / "tensorboard").mkdir(parents=True)
    assert link_job_board(sweep, sweep / "2", "model=cnn").name == "model=cnn (2)"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has ended (its new parent may never reap it)


def test_a_jobs_process_ends_when_the_commands_process_is_killed():
    """A joblib worker outlived a command killed by the system; the watchdog ends it."""
    import subprocess
    import sys
    import time

    job = (
        "import time; from kdist.runs.job_output import end_with_parent; "
        "end_with_parent(poll=0.1, grace=5); print('ready', flush=True); time.sleep(120)"
    )
    command = (
        "import subprocess, sys, time; "
        f"child = subprocess.Popen([sys.executable, '-c', {job!r}]); "
        "print(child.pid, flush=True); time.sleep(120)"
    )
    parent = subprocess.Popen([sys.executable, "-c", command], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    try:
        assert parent.stdout.readline().strip() == "ready"
        parent.kill()  # as the out-of-memory killer would
        parent.wait(30)
        deadline = time.monotonic() + 30
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker)
    finally:
        for pid in (worker, parent.pid):
            if _alive(pid):
                os.kill(pid, 9)
        parent.stdout.close()
        parent.wait(30)
