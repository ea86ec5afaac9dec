"""Hydra multirun: one folder per job, `summary.csv` in the sweep folder, the objective
returned for sweepers (Optuna)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import REPO, run_module
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf

from kdist.runs.fileio import read_csv
from kdist.runs.sweep import SummaryCallback

FAST = ["trainer=fast_dev", "trainer.verbose=0", "callbacks=minimal"]


def test_multirun_writes_a_folder_per_job_and_summary_csv(tmp_path: Path):
    """The issue's sweep: 2 learning rates x 2 models = 4 jobs (each 10 steps here)."""
    sweep = tmp_path / "sweep"
    done = run_module(
        "kdist.train",
        [
            "-m",
            "optimizer.learning_rate=1e-3,3e-3",
            "model=mlp,cnn",
            *FAST,
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # A folder per job, beside `.jobs/` (each job's row, recorded by the process that ran
    # it: a parallel launcher's jobs run in other processes).
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert [p.name for p in jobs] == ["0", "1", "2", "3"]
    assert sorted(p.name for p in (sweep / ".jobs").iterdir()) == [f"{n}.json" for n in range(4)]
    assert all((p / "metrics.json").is_file() for p in jobs)
    rows = read_csv(sweep / "summary.csv")
    assert len(rows) == 4
    # The sweep plot sits next to the table (a real PNG).
    assert (sweep / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {(float(r["optimizer.learning_rate"]), r["model"]) for r in rows} == {
        (1e-3, "mlp"),
        (1e-3, "cnn"),
        (3e-3, "mlp"),
        (3e-3, "cnn"),
    }
    for row in rows:
        assert row["status"] == "COMPLETED"
        metrics = json.loads((sweep / row["run_dir"] / "metrics.json").read_text())
        assert metrics["objective"]["name"] == "val_accuracy"
        assert float(row["objective"]) == pytest.approx(metrics["objective"]["value"])
        assert float(row["val_accuracy"]) == pytest.approx(metrics["validation"]["accuracy"])
        assert row["overrides"].startswith("optimizer.learning_rate=")


def test_a_two_job_multirun_compares_in_tensorboard_and_plots_the_swept_value(tmp_path: Path):
    from hparams_events import sessions

    from kdist.runs import plots

    sweep = tmp_path / "sweep"
    done = run_module(
        "kdist.train",
        [
            "-m",
            "optimizer.learning_rate=1e-3,3e-3",
            *FAST,
            "callbacks.tensorboard.enabled=true",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for job, rate in (("0", 1e-3), ("1", 3e-3)):
        (session,) = sessions(sweep / job / "tensorboard")
        # Named by what differs (the swept value), then the sweep folder and the job.
        assert session["group"] == f"optimizer.learning_rate={rate} (sweep/{job})"
        assert session["hparams"]["optimizer.learning_rate"] == pytest.approx(rate)
        assert session["hparams"]["callbacks"] == "minimal"
        objective = json.loads((sweep / job / "metrics.json").read_text())["objective"]
        assert objective["name"] == "val_accuracy"
        assert session["scalars"]["val_accuracy"] == pytest.approx(objective["value"])
    # The plot: the objective against the swept value, the objective's own direction.
    (ax,) = plots.sweep_figure(sweep / "summary.csv").axes
    assert ax.get_xlabel() == "optimizer.learning_rate"
    points = next(line for line in ax.get_lines() if line.get_label() == "val_accuracy")
    assert list(points.get_xdata()) == pytest.approx([0.001, 0.003])
    assert ax.get_ylabel() == "val_accuracy (max)"
    assert (sweep / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The multirun's last line says where its files are.
    assert (
        f"summary {sweep / 'summary.csv'}, plot {sweep / 'summary.png'}; "
        f"compare the jobs: tensorboard --logdir {sweep / 'tensorboard'} (HParams tab)"
    ) in done.stdout
    # There, TensorBoard names each job's runs by its swept value, with no `tensorboard/`
    # level (the scalars and the HParams session alike).
    assert _board_runs(sweep / "tensorboard") == [
        f"optimizer.learning_rate={rate}{run}"
        for rate in (0.001, 0.003)
        for run in ("", "/train", "/validation")
    ]


def _board_runs(logdir: Path) -> list[str]:
    """The run names TensorBoard gives the event folders under `logdir`."""
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    board = EventMultiplexer()
    board.AddRunsFromDirectory(str(logdir))
    return sorted(board.Runs())


def test_a_mirrored_sweep_runs_every_job_on_both_replicas(tmp_path: Path):
    # The jobs of a multirun share one process: each builds its own MirroredStrategy on
    # the 2 logical CPUs the first one set up.
    sweep = tmp_path / "sweep"
    done = run_module(
        "kdist.train",
        [
            "-m",
            "optimizer.learning_rate=1e-3,3e-3",
            "strategy=mirrored",
            "runtime.logical_devices=2",
            *FAST,
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_csv(sweep / "summary.csv")
    assert [r["status"] for r in rows] == ["COMPLETED", "COMPLETED"]
    assert {float(r["optimizer.learning_rate"]) for r in rows} == {1e-3, 3e-3}
    for row in rows:
        metrics = json.loads((sweep / row["run_dir"] / "metrics.json").read_text())
        assert (metrics["strategy"], metrics["num_replicas"]) == ("MirroredStrategy", 2)
        assert (row["strategy"], int(row["num_replicas"])) == ("MirroredStrategy", 2)
        assert int(row["steps"]) == 10


def _job(tmp_path: Path, num: int, overrides: list[str], *, mode=RunMode.MULTIRUN):
    sweep = tmp_path / "sweep"
    run_dir = sweep / str(num)
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    config = OmegaConf.create(
        {
            "hydra": {
                "mode": mode,
                "runtime": {"output_dir": str(run_dir)},
                "sweep": {"dir": str(sweep)},
                "job": {"num": num},
                "overrides": {"task": overrides},
            }
        }
    )
    return sweep, run_dir, config


def test_summary_rows_for_completed_and_failed_jobs(tmp_path: Path):
    callback = SummaryCallback()
    sweep, run_dir, config = _job(tmp_path, 0, ["model=mlp"])
    metrics = {
        "train": {"loss": 0.5},
        "validation": {"loss": 0.4, "accuracy": 0.9},
        "epochs": 2,
        "objective": {"name": "val_accuracy", "direction": "max", "value": 0.9},
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    done = JobReturn(status=JobStatus.COMPLETED, _return_value=0.9)
    callback.on_job_end(config, done)
    _, _, failed_config = _job(tmp_path, 1, ["model=cnn"])
    failed = JobReturn(status=JobStatus.FAILED, _return_value=ValueError("boom\nmore"))
    callback.on_job_end(failed_config, failed)
    # A job another launcher ran (only its folder is visible here).
    _job(tmp_path, 2, ["model=resnet"])
    callback.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))

    rows = read_csv(sweep / "summary.csv")
    assert [(r["job"], r["status"], r["model"]) for r in rows] == [
        ("0", "COMPLETED", "mlp"),
        ("1", "FAILED", "cnn"),
        ("2", "UNKNOWN", "resnet"),
    ]
    assert rows[0]["objective"] == "0.9" and rows[0]["val_accuracy"] == "0.9"
    assert rows[1]["error"] == "ValueError: boom more"
    assert list(rows[0])[:2] == ["job", "status"] and list(rows[0])[-1] == "run_dir"


def test_single_runs_write_no_summary(tmp_path: Path):
    callback = SummaryCallback()
    sweep, _, config = _job(tmp_path, 0, ["model=mlp"], mode=RunMode.RUN)
    callback.on_job_end(config, JobReturn(status=JobStatus.COMPLETED, _return_value=0.5))
    assert not (sweep / "summary.csv").exists()


def test_summary_callback_is_registered_in_train_yaml():
    config = OmegaConf.load(REPO / "kdist" / "conf" / "train.yaml")
    assert config.hydra.callbacks.summary._target_ == "kdist.runs.sweep.SummaryCallback"


@pytest.mark.slow
@pytest.mark.parametrize(
    "strategy",
    [[], ["strategy=mirrored", "runtime.logical_devices=2"]],
    ids=["default", "mirrored"],
)
def test_optuna_recipe_optimises_the_returned_objective(tmp_path: Path, strategy: list[str]):
    sweep = tmp_path / "sweep"
    done = run_module(
        "kdist.train",
        [
            "-cd",
            str(REPO / "recipes"),
            "-cn",
            "optuna_sweep",
            "-m",
            "hydra.sweeper.n_trials=3",
            *FAST,
            *strategy,
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "setup plugin alembic" not in done.stdout + done.stderr
    rows = read_csv(sweep / "summary.csv")
    assert len(rows) == 3 and {r["status"] for r in rows} == {"COMPLETED"}
    assert all(r["optimizer"] in ("adam", "adamw") for r in rows)
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["best_value"] == pytest.approx(max(float(r["objective"]) for r in rows))
    replicas = 2 if strategy else 1
    for row in rows:
        metrics = json.loads((sweep / row["run_dir"] / "metrics.json").read_text())
        assert metrics["num_replicas"] == replicas


@pytest.mark.slow
def test_a_failed_job_is_a_failed_row(tmp_path: Path):
    sweep = tmp_path / "sweep"
    done = run_module(
        "kdist.train",
        [
            "-m",
            "model=custom",
            "model._target_=helpers.flaky_model",
            "+model.mode=ok,error",
            *FAST,
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        timeout=600,
        env={"PYTHONPATH": str(REPO / "tests")},
    )
    assert done.returncode != 0  # Hydra reports the failed job after the sweep
    rows = read_csv(sweep / "summary.csv")
    assert [(r["model.mode"], r["status"]) for r in rows] == [
        ("ok", "COMPLETED"),
        ("error", "FAILED"),
    ]
    assert "flaky_model cannot build" in rows[1]["error"]
