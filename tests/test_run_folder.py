"""A run folder has one owner and one set of settings (issue 13, items 4, 5 and 9).

Cost: about 15 s fast (two short `python -m kdist.train` subprocesses that stop before
TensorFlow starts); the train-then-change-settings round trip is `slow`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import LOGICAL, REPO, compose, run_module

from kdist.config import ConfigError
from kdist.runs import lock as run_lock
from kdist.runs import resume_check


def _errors(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("kdist:")]


# -- the lock ----------------------------------------------------------------------------


def test_a_second_holder_is_refused_naming_the_first(tmp_path: Path):
    with run_lock.hold(tmp_path / "run"):
        with pytest.raises(ConfigError) as raised, run_lock.hold(tmp_path / "run"):
            pass
        assert f"is in use by another kdist run (pid {os.getpid()} on " in str(raised.value)
        assert str(raised.value).startswith("hydra.run.dir=")
    with run_lock.hold(tmp_path / "run"):  # released on leaving the block
        pass
    assert (tmp_path / "run" / ".lock").read_text() == ""


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path: Path):
    code = (
        "import os, sys; from kdist import run_lock\n"
        f"with run_lock.hold({str(tmp_path)!r}):\n"
        "    print('locked', flush=True); os.kill(os.getpid(), 9)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert result.returncode == -9 and "locked" in result.stdout
    assert (tmp_path / ".lock").read_text().split()[0].isdigit()  # its pid is still written
    with run_lock.hold(tmp_path):
        assert (tmp_path / ".lock").read_text().split()[0] == str(os.getpid())


def test_without_flock_the_pid_decides(tmp_path: Path, monkeypatch):
    import errno
    import fcntl

    def no_flock(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    lock = tmp_path / ".lock"
    parent = os.getppid()  # alive, and not this process
    lock.write_text(f"{parent} {os.uname().nodename}\n")
    refused = pytest.raises(ConfigError, match=f"in use by another kdist run \\(pid {parent} on ")
    with refused, run_lock.hold(tmp_path):
        pass
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    lock.write_text(f"{dead} {os.uname().nodename}\n")  # a stale lock: its process is gone
    with run_lock.hold(tmp_path):
        assert lock.read_text().split()[0] == str(os.getpid())


def test_train_into_a_folder_in_use_exits_2_naming_the_holder(tmp_path: Path):
    run_dir = tmp_path / "run"
    with run_lock.hold(run_dir):
        result = run_module(
            "kdist.train", [LOGICAL, f"hydra.run.dir={run_dir}"], cwd=tmp_path, timeout=120
        )
    assert result.returncode == 2, result.stderr
    assert _errors(result) == [
        f"kdist: config error: hydra.run.dir='{run_dir}': is in use by another kdist run "
        f"(pid {os.getpid()} on {os.uname().nodename}); wait for it to finish, stop it, "
        "or choose another hydra.run.dir"
    ]
    assert "Traceback" not in result.stderr
    assert not (run_dir / "backup").exists()


# -- resuming with other settings -------------------------------------------------------


def test_changed_keys_lists_what_changes_results_only():
    base = compose([])
    same = compose(
        [
            "trainer.epochs=99",
            "trainer.verbose=0",
            "strategy=mirrored",
            "callbacks=minimal",
            "runtime.logical_devices=1",
        ]
    )
    assert resume_check.changed_keys(base, same) == []
    other = compose(["optimizer.learning_rate=0.5", "model.units=[8]", "runtime.seed=1"])
    assert resume_check.changed_keys(base, other) == [
        "model.units",
        "optimizer.learning_rate",
        "runtime.seed",
    ]
    assert "data.source._target_" in resume_check.changed_keys(base, compose(["data=synthetic"]))


def _folder_with_checkpoints(run_dir: Path) -> None:
    resume_check.save_config(run_dir, compose([]))
    (run_dir / "backup" / "ckpt-20.index").write_text("")


def test_resume_with_other_settings_is_refused_listing_them(tmp_path: Path):
    run_dir = tmp_path / "run"
    _folder_with_checkpoints(run_dir)
    resume_check.check_resume(run_dir, compose(["trainer.epochs=30"]))  # allowed
    with pytest.raises(ConfigError) as raised:
        resume_check.check_resume(run_dir, compose(["optimizer.learning_rate=0.5"]))
    assert "changed: optimizer.learning_rate;" in str(raised.value)
    assert "trainer.allow_resume_changes=true" in str(raised.value)
    allowed = compose(["optimizer.learning_rate=0.5", "trainer.allow_resume_changes=true"])
    resume_check.check_resume(run_dir, allowed)
    # Without checkpoints there is nothing to resume: any settings may start afresh.
    (run_dir / "backup" / "ckpt-20.index").unlink()
    resume_check.check_resume(run_dir, compose(["optimizer.learning_rate=0.5"]))


def test_train_resuming_with_other_settings_exits_2_with_one_line(tmp_path: Path):
    run_dir = tmp_path / "run"
    _folder_with_checkpoints(run_dir)
    result = run_module(
        "kdist.train",
        [LOGICAL, f"hydra.run.dir={run_dir}", "optimizer.learning_rate=0.5", "model.units=[8]"],
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    errors = _errors(result)
    assert len(errors) == 1, result.stderr
    assert "changed: model.units, optimizer.learning_rate;" in errors[0]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_resume_refuses_a_changed_learning_rate_unless_allowed(tmp_path: Path):
    """Train, then re-run the folder with another learning rate (about 40 s)."""
    args = [LOGICAL, "hydra.run.dir=run", "trainer=fast_dev", "trainer.verbose=0"]
    first = run_module("kdist.train", args, cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr
    saved = (tmp_path / "run" / "backup" / "config.yaml").read_text()
    assert "learning_rate: 0.001" in saved
    changed = run_module(
        "kdist.train", [*args, "optimizer.learning_rate=0.5"], cwd=tmp_path, timeout=300
    )
    assert changed.returncode == 2, changed.stderr
    assert "changed: optimizer.learning_rate;" in _errors(changed)[0]
    allowed = run_module(
        "kdist.train",
        [*args, "optimizer.learning_rate=0.5", "trainer.allow_resume_changes=true"],
        cwd=tmp_path,
        timeout=300,
    )
    assert allowed.returncode == 0, allowed.stderr
    log = (tmp_path / "run" / "train.log").read_text()
    assert "resuming with changed settings (trainer.allow_resume_changes=true)" in log
    # ... and the change is applied: the restored rate is replaced by the configured one.
    assert (
        "resuming with optimizer.learning_rate 0.5 as configured (the checkpoint held 0.001)" in log
    )
    assert "learning_rate: 0.5" in (tmp_path / "run" / "backup" / "config.yaml").read_text()


# -- Ctrl-C and a missing backup ----------------------------------------------------------

RESUMABLE = [
    "trainer.epochs=3",
    "trainer.steps_per_epoch=12",
    "trainer.global_batch_size=32",
    "trainer.steps_per_execution=1",
    "trainer.verbose=0",
    "callbacks.backup.every_n_steps=5",
]


def test_without_backup_resume_falls_back_to_checkpoints(tmp_path: Path, caplog):
    import shutil

    import kdist

    run_dir = tmp_path / "run"
    kdist.Experiment(compose([*RESUMABLE, "trainer.epochs=1"]), run_dir=run_dir).fit()
    shutil.rmtree(run_dir / "backup")
    again = kdist.Experiment(compose([*RESUMABLE, "trainer.epochs=2"]), run_dir=run_dir)
    with caplog.at_level("WARNING", logger="kdist"):
        assert again.restore() == 12  # the checkpoint at the end of epoch 1
    assert (
        f"no readable backup in backup/: resuming from checkpoint {run_dir}/checkpoints/ckpt-12"
        in (caplog.text)
    )


def test_ctrl_c_before_training_is_one_line_and_130(monkeypatch, capsys):
    import kdist.experiment
    import kdist.train
    from kdist.callbacks import guards

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(kdist.experiment, "Experiment", interrupted)
    # `run` turns Ctrl-C saving on for the process; keep it off for the other tests.
    monkeypatch.setattr(guards, "_SAVE_ON_CTRL_C", False)
    with pytest.raises(SystemExit) as raised:
        kdist.train.run(compose([]))
    assert raised.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "kdist: interrupted (Ctrl-C), no backup saved now; a re-run resumes from the last one"
    ]


@pytest.mark.slow
def test_ctrl_c_saves_a_backup_exits_130_then_resumes(tmp_path: Path):
    """SIGINT at step 9 (backups every 1000 steps) then a re-run (about 30 s)."""
    env = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])}
    args = [*RESUMABLE, LOGICAL, "hydra.run.dir=run", "callbacks.backup.every_n_steps=1000"]
    stopped = run_module(
        "kdist.train",
        [*args, "callbacks.extra=[{_target_: helpers.KillAtStep, step: 9, signal_name: SIGINT}]"],
        cwd=tmp_path,
        env=env,
    )
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    assert "Traceback" not in stopped.stderr
    assert _errors(stopped) == [
        "kdist: interrupted (Ctrl-C): saved a backup; run the same command again to resume"
    ]
    assert sorted(p.name for p in (tmp_path / "run" / "backup").glob("*.index")) == ["ckpt-9.index"]
    resumed = run_module("kdist.train", args, cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "continuing at step 9" in resumed.stdout + resumed.stderr
    assert '"steps": 36' in (tmp_path / "run" / "metrics.json").read_text()


def test_a_train_start_removes_temp_leftovers_of_an_interrupted_save(tmp_path: Path):
    from helpers import compose

    import kdist

    leftover = tmp_path / "backup" / "ckpt-5_temp"
    leftover.mkdir(parents=True)
    (leftover / "part").write_bytes(b"half a checkpoint")
    exp = kdist.Experiment(
        compose(["trainer=fast_dev", "trainer.verbose=0", "callbacks.curves=false"]),
        run_dir=tmp_path,
    )
    exp.restore()
    assert not leftover.exists()
