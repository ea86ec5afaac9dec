"""Multiruns on Hydra's launchers: joblib (jobs side by side) and submitit (`submitit_local`
runs the path `submitit_slurm` takes, on this machine). Everything the basic launcher's
sweep gives (a folder and lock per job, `summary.csv`, the plot, the best job named,
HParams), failed jobs listed with their reason, and a job that is itself a 2-task cluster.

Cost: each sweep starts TensorFlow in 2-3 processes: the submitit sweep with a failed job
took 10.5 s at load 4 (in the fast suite); the joblib/basic pair and the 2-task job are in
tests/slow_cases.txt; the cases at the end read records and environments only.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from helpers import REPO, free_port, run_module
from hparams_events import sessions
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf

from kdist.cluster import resolve
from kdist.config.errors import ConfigError
from kdist.runs.fileio import read_csv
from kdist.runs.sweep import JOBS, SummaryCallback, best_row, set_chief

FAST = ["trainer=fast_dev", "trainer.verbose=2", "callbacks=minimal"]
# submitit's own bound on a job (minutes): a stuck job is stopped by submitit itself.
SUBMITIT = ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"]


def _sweep(tmp_path: Path, name: str, args: list[str], **kwargs):
    sweep = tmp_path / name
    done = run_module(
        "kdist.train",
        ["-m", *args, *FAST, f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
        timeout=600,
        **kwargs,
    )
    return sweep, done


def test_a_joblib_sweep_gives_what_the_basic_launchers_sweep_gives(tmp_path: Path):
    rates = ["optimizer.learning_rate=1e-3,3e-3", "callbacks.tensorboard.enabled=true"]
    basic, basic_done = _sweep(tmp_path, "basic", rates)
    assert basic_done.returncode == 0, basic_done.stderr[-3000:]
    mark = f"kdist-test-{uuid.uuid4().hex}"  # in the environment of every process it starts
    joblib, done = _sweep(
        tmp_path,
        "joblib",
        ["hydra/launcher=joblib", "hydra.launcher.n_jobs=3", *rates],
        env={"KDIST_TEST_MARK": mark},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    # n_jobs is bounded by the sweep's 2 jobs, and says so; no worker outlives the command.
    assert "kdist: hydra.launcher.n_jobs=3: runs 2 job(s) at a time (the sweep has 2 job(s))" in (
        done.stderr
    )
    assert "Joblib.Parallel(n_jobs=2," in output
    assert _marked_processes(mark) == []
    # Each job's lines carry the job; TensorFlow's start-up lines are dropped, as the basic
    # launcher drops them.
    for num in (0, 1):
        assert f"[job {num}] Epoch 2/2" in output and f"[job {num}] validation accuracy" in output
    assert [line for line in output.splitlines() if "Epoch " in line and "[job " not in line] == []
    for noise in ("absl::InitializeLog", "oneDNN custom operations", "cuda drivers", "cuInit"):
        assert noise not in output
    expected = {r["job"]: r for r in read_csv(basic / "summary.csv")}
    rows = read_csv(joblib / "summary.csv")
    assert [r["status"] for r in rows] == ["COMPLETED", "COMPLETED"]
    for row in rows:
        # The same job trains to the same numbers in another process.
        assert row["optimizer.learning_rate"] == expected[row["job"]]["optimizer.learning_rate"]
        assert float(row["objective"]) == pytest.approx(float(expected[row["job"]]["objective"]))
        folder = joblib / row["run_dir"]
        assert (folder / "metrics.json").is_file() and (folder / ".lock").is_file()
        # Each job's per-epoch lines are in its own train.log.
        assert "Epoch 2/2" in (folder / "train.log").read_text()
    assert (joblib / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    best = best_row(rows)
    assert best is not None
    assert f"best job {best['job']} (val_accuracy {float(best['objective']):.4g})" in done.stdout
    # Two multiruns under one logdir: each job's session is named by its own folder, so the
    # two job 0s are two rows in TensorBoard, each with its own value.
    groups = {}
    for sweep in (basic, joblib):
        for row in read_csv(sweep / "summary.csv"):
            (session,) = sessions(sweep / row["run_dir"] / "tensorboard")
            assert session["hparams"]["optimizer.learning_rate"] == pytest.approx(
                float(row["optimizer.learning_rate"])
            )
            assert session["scalars"]["val_accuracy"] == pytest.approx(float(row["objective"]))
            assert session["declared"][0] == "val_accuracy"  # the objective first
            groups[session["group"]] = row["job"]
    rate = {"0": "optimizer.learning_rate=0.001", "1": "optimizer.learning_rate=0.003"}
    assert groups == {
        f"{rate[job]} ({sweep}/{job})": job for sweep in ("basic", "joblib") for job in "01"
    }


def _marked_processes(mark: str) -> list[int]:
    """The processes whose environment holds `KDIST_TEST_MARK=mark`."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"KDIST_TEST_MARK={mark}".encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue  # ended meanwhile, or another user's
    return found


def test_a_submitit_sweep_lists_the_failed_job_and_finishes_the_other(tmp_path: Path):
    sweep, done = _sweep(
        tmp_path,
        "sweep",
        [
            *SUBMITIT,
            "model=custom",
            "model._target_=helpers.flaky_model",
            "+model.mode=error,ok",
        ],
        env={"PYTHONPATH": str(REPO / "tests")},
    )
    assert done.returncode != 0  # Hydra reports the failed job after the sweep
    # The sweep says where its jobs' output goes when it starts, and each job's at its end.
    assert "kdist: submitit runs each job in its own process; its output goes to " in done.stdout
    for num in (0, 1):
        (line,) = [
            x for x in done.stdout.splitlines() if x.startswith(f"kdist: job {num}: output ")
        ]
        job_output = Path(line.rpartition(" ")[2])
        assert job_output.is_file() and job_output.is_relative_to(sweep / ".submitit")
        # TensorFlow's start-up lines are dropped there too.
        text = job_output.read_text() + job_output.with_suffix(".err").read_text()
        assert "oneDNN custom operations" not in text and "absl::InitializeLog" not in text
    rows = read_csv(sweep / "summary.csv")
    assert [(r["model.mode"], r["status"]) for r in rows] == [
        ("error", "FAILED"),
        ("ok", "COMPLETED"),
    ]
    assert "flaky_model cannot build" in rows[0]["error"]
    assert json.loads((sweep / rows[1]["run_dir"] / "metrics.json").read_text())["steps"] == 10
    # The sweep's own process ends with the summary although a job failed.
    assert "kdist: multirun done, 1 of 2 job(s) completed, best job 1" in done.stdout
    assert (sweep / "summary.png").is_file()


def test_a_two_task_submitit_job_trains_as_two_workers(tmp_path: Path):
    """`tasks_per_node=2`: each task finds its place in submitit's variables; MWMS trains.

    The expected numbers are a single process's run of the same job (one replica of the
    same global batch gives the same updates)."""
    sweep, done = _sweep(
        tmp_path,
        "sweep",
        [
            *SUBMITIT,
            "hydra.launcher.tasks_per_node=2",
            "strategy=multi_worker_mirrored",
            f"strategy.port_base={free_port()}",
        ],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    single = run_module(
        "kdist.train", [*FAST, f"hydra.run.dir={tmp_path / 'single'}"], cwd=tmp_path, timeout=300
    )
    assert single.returncode == 0, single.stderr[-3000:]
    expected = json.loads((tmp_path / "single" / "metrics.json").read_text())
    metrics = json.loads((sweep / "0" / "metrics.json").read_text())
    assert (metrics["strategy"], metrics["num_replicas"]) == ("CollectiveAllReduceStrategy", 2)
    assert metrics["steps"] == expected["steps"]
    assert metrics["validation"]["accuracy"] == pytest.approx(
        expected["validation"]["accuracy"], abs=1e-6
    )
    assert metrics["train"]["loss"] == pytest.approx(expected["train"]["loss"], rel=1e-4)
    # Only the chief wrote: its lines once in train.log, none of worker 1's.
    log = (sweep / "0" / "train.log").read_text()
    assert "worker 0 of 2 worker(s) from submitit" in log
    assert "worker 1" not in log and log.count("trained 10 steps") == 1
    task_logs = "".join(p.read_text() for p in sweep.glob(".submitit/*/*_1_log.out"))
    assert "worker 1 of 2 worker(s) from submitit" in task_logs
    rows = read_csv(sweep / "summary.csv")
    assert [(r["job"], r["status"], r["num_replicas"]) for r in rows] == [("0", "COMPLETED", "2")]


# -- fast: the records and the environment ------------------------------------------------


def _config(sweep: Path, num: int, overrides: list[str]):
    run_dir = sweep / str(num)
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir, OmegaConf.create(
        {
            "hydra": {
                "mode": RunMode.MULTIRUN,
                "runtime": {"output_dir": str(run_dir)},
                "sweep": {"dir": str(sweep)},
                "job": {"num": num},
                "overrides": {"task": overrides},
            }
        }
    )


def test_jobs_another_process_ran_keep_their_status_and_error(tmp_path: Path):
    """A launcher's worker records the job; the sweep's own process reads it back."""
    sweep = tmp_path / "sweep"
    run_dir, config = _config(sweep, 0, ["model=mlp"])
    (run_dir / "metrics.json").write_text(
        json.dumps({"objective": {"name": "val_loss", "direction": "min", "value": 0.25}})
    )
    SummaryCallback().on_job_end(config, JobReturn(status=JobStatus.COMPLETED, _return_value=0.25))
    _, failed = _config(sweep, 1, ["model=cnn"])
    error = RuntimeError("out of memory\non the node")
    SummaryCallback().on_job_end(failed, JobReturn(status=JobStatus.FAILED, _return_value=error))
    assert sorted(p.name for p in (sweep / JOBS).iterdir()) == ["0.json", "1.json"]

    main = SummaryCallback()  # the sweep's own process: it ran no job itself
    main.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    rows = read_csv(sweep / "summary.csv")
    assert [(r["job"], r["status"], r["error"]) for r in rows] == [
        ("0", "COMPLETED", ""),
        ("1", "FAILED", "RuntimeError: out of memory on the node"),
    ]
    assert best_row(rows)["job"] == "0"


def test_another_task_of_a_multi_task_job_records_nothing(tmp_path: Path):
    sweep = tmp_path / "sweep"
    _, config = _config(sweep, 0, ["model=mlp"])
    set_chief(False)  # what kdist.train.run says in task 1 of a 2-task job
    try:
        SummaryCallback().on_job_end(config, JobReturn(status=JobStatus.COMPLETED))
    finally:
        set_chief(True)
    assert not (sweep / JOBS).exists() and not (sweep / "summary.csv").exists()


def test_best_row_follows_the_objectives_direction():
    rows = [
        {"job": 0, "status": "COMPLETED", "objective": 0.5, "objective_direction": "min"},
        {"job": 1, "status": "COMPLETED", "objective": 0.2, "objective_direction": "min"},
        {"job": 2, "status": "FAILED", "objective": 0.1, "objective_direction": "min"},
    ]
    assert best_row(rows)["job"] == 1
    assert best_row([{**r, "objective_direction": "max"} for r in rows])["job"] == 0
    assert best_row([{"job": 0, "status": "FAILED", "objective": ""}]) is None


def test_a_submitit_local_task_finds_its_place():
    env = {"SUBMITIT_LOCAL_NTASKS": "2", "SUBMITIT_LOCAL_GLOBALID": "1"}
    info = resolve(env, port_base=20000)
    assert info.source == "submitit"
    assert info.cluster == {"worker": ["localhost:20000", "localhost:20001"]}
    assert (info.task_type, info.task_index, info.is_chief) == ("worker", 1, False)
    assert resolve({**env, "SUBMITIT_LOCAL_GLOBALID": "0"}).is_chief
    # One task is no cluster; a real SLURM step (srun) is read from SLURM's variables.
    assert resolve({"SUBMITIT_LOCAL_NTASKS": "1", "SUBMITIT_LOCAL_GLOBALID": "0"}).source == "none"
    with pytest.raises(ConfigError, match="SUBMITIT_LOCAL_GLOBALID"):
        resolve({**env, "SUBMITIT_LOCAL_GLOBALID": "2"})


LAUNCHER_RECIPES = {
    "joblib_sweep": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
    "slurm_sweep": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
    "submitit_local_sweep": (
        "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
    ),
}


@pytest.mark.parametrize("name", sorted(LAUNCHER_RECIPES))
def test_each_launcher_recipe_picks_its_launcher(name: str, tmp_path: Path):
    done = run_module(
        "kdist.train",
        ["-cd", str(REPO / "recipes"), "-cn", name, "--cfg", "hydra", "-p", "hydra.launcher"],
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"_target_: {LAUNCHER_RECIPES[name]}" in done.stdout


def test_train_help_shows_the_launchers(tmp_path: Path):
    done = run_module("kdist.train", ["--help"], cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    for option in ("joblib", "submitit_slurm", "submitit_local"):
        assert f"hydra/launcher={option}" in done.stdout
        # Each option named there is one Hydra finds (its plugin is installed).
        listed = run_module(
            "kdist.train",
            [f"hydra/launcher={option}", "--cfg", "hydra", "-p", "hydra.launcher._target_"],
            cwd=tmp_path,
            timeout=120,
        )
        assert listed.returncode == 0 and "Launcher" in listed.stdout, listed.stderr[-2000:]


def test_a_jobs_process_leaves_the_plot_to_the_sweeps_own(tmp_path: Path, monkeypatch):
    """A launcher pickles the sweep's callback (after `on_multirun_start`) into each job's
    process: that copy records the job's row but draws no plot (no matplotlib per job)."""
    import pickle

    sweep = tmp_path / "sweep"
    run_dir, config = _config(sweep, 0, ["model=mlp"])
    (run_dir / "metrics.json").write_text(
        json.dumps({"objective": {"name": "val_loss", "direction": "min", "value": 0.25}})
    )
    callback = SummaryCallback()
    callback.on_multirun_start(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    in_job = pickle.loads(pickle.dumps(callback))
    callback._sweep_dir = None  # this process's exit writes nothing more
    monkeypatch.setattr("os.getpid", lambda: -1)  # another process
    in_job.on_job_end(config, JobReturn(status=JobStatus.COMPLETED, _return_value=0.25))
    assert (sweep / "summary.csv").is_file() and (sweep / JOBS / "0.json").is_file()
    assert not (sweep / "summary.png").exists()
