"""A run folder a refused run leaves as it was, that no link turns elsewhere, whose
resume does what it says (issue 31).

Cost: about 25 s fast (`python -m kdist.train` subprocesses refused before TensorFlow
starts, in-process checks); the train-then-resume cases are `slow`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import LOGICAL, compose, run_module
from omegaconf import OmegaConf

from kdist.config import ConfigError
from kdist.run_setup import Resume, accept_run_dir, setup_run, take_run_dir
from kdist.runs import lock as run_lock
from kdist.runs import resume_check
from kdist.runs.fileio import LinkError, open_nofollow


def _errors(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("kdist:")]


def _hashes(root: Path) -> dict[str, str]:
    """Every entry under `root` (links as their target's name), with its content's hash."""
    found = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = f"-> {os.readlink(path)}"
        elif path.is_file():
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[name] = "/"
    return found


def _finished_folder(run_dir: Path, overrides: list[str] | None = None) -> Path:
    """A run folder as a finished run leaves it (config, checkpoints, log, metrics)."""
    cfg = compose(overrides or [])
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (run_dir / ".hydra" / "overrides.yaml").write_text("- trainer=fast_dev\n")
    resume_check.save_config(run_dir, cfg)
    (run_dir / "backup" / "ckpt-20.index").write_bytes(b"index")
    (run_dir / "backup" / "ckpt-20.data-00000-of-00001").write_bytes(b"data")
    (run_dir / "train.log").write_text("10:00:00 INFO trained 20 steps\n")
    (run_dir / "metrics.json").write_text('{"steps": 20}\n')
    (run_dir / "history.csv").write_text("epoch,loss\n0,1.0\n")
    (run_dir / ".lock").write_text("")
    return run_dir


# -- nothing written before the run is accepted ---------------------------------------------


def test_a_refused_rerun_leaves_every_file_of_the_folder_unchanged(tmp_path: Path):
    run_dir = _finished_folder(tmp_path / "run")
    before = _hashes(run_dir)
    result = run_module(
        "kdist.train",
        [LOGICAL, f"hydra.run.dir={run_dir}", "data.source.split_seed=7"],
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    errors = _errors(result)
    assert len(errors) == 1 and "changed: data.source.split_seed;" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert _hashes(run_dir) == before  # .hydra/config.yaml included


def test_a_run_refused_by_the_lock_leaves_the_folder_unchanged(tmp_path: Path):
    run_dir = _finished_folder(tmp_path / "run")
    with run_lock.hold(run_dir):  # a run still training
        before = _hashes(run_dir)
        result = run_module(
            "kdist.train",
            [LOGICAL, f"hydra.run.dir={run_dir}", "data.source.split_seed=7"],
            cwd=tmp_path,
            timeout=120,
        )
        assert result.returncode == 2, result.stderr
        errors = _errors(result)
        assert len(errors) == 1 and "is in use by another kdist run (pid" in errors[0]
        assert _hashes(run_dir) == before


@pytest.mark.parametrize("had_lock", [True, False])
def test_the_checks_read_only(tmp_path: Path, had_lock: bool):
    run_dir = _finished_folder(tmp_path / "run")
    if not had_lock:  # checkpoints copied into a folder without kdist's lock file
        (run_dir / ".lock").unlink()
    before = _hashes(run_dir)
    changed = compose(["optimizer.learning_rate=0.5"])
    accept_run_dir(run_dir, changed)  # the folder's own checks: links, foreign files
    with contextlib.ExitStack() as held:
        with pytest.raises(ConfigError, match=r"changed: optimizer\.learning_rate"):
            take_run_dir(run_dir, setup_run(changed), held)
        assert not run_lock.held_here(run_dir)  # a refused run holds nothing
    assert _hashes(run_dir) == before  # nor leaves a lock file it made
    same = compose([])
    with contextlib.ExitStack() as held:
        setup = take_run_dir(run_dir, setup_run(same), held)  # the same settings: accepted
        assert setup.resumed_in(run_dir) and setup.resume == Resume(run_dir, ())
        assert run_lock.held_here(run_dir)  # until the run ends
        with pytest.raises(ConfigError, match="in use"):
            run_lock.check_free(run_dir)
    run_lock.check_free(run_dir)


# -- links and files that are not kdist's ------------------------------------------------


@pytest.mark.parametrize("name", [".lock", "history.csv", "train.log", "backup", ".hydra"])
def test_a_link_at_a_name_kdist_writes_is_refused(tmp_path: Path, name: str):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("another user's file\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    target = victim if name in ("backup", ".hydra") else victim / "notes.txt"
    (run_dir / name).symlink_to(target)
    before = _hashes(tmp_path)
    with pytest.raises(ConfigError) as raised:
        accept_run_dir(run_dir, compose([]))
    assert str(raised.value).startswith(f"hydra.run.dir='{run_dir}': ")
    assert "does not write through links" in str(raised.value) or name == ".lock"
    assert _hashes(tmp_path) == before


@pytest.mark.slow
def test_train_refuses_a_linked_train_log_before_hydra_opens_it(tmp_path: Path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "train.log").symlink_to(victim)
    (run_dir / "history.csv").symlink_to(tmp_path / "would-be-created.csv")
    result = run_module("kdist.train", [LOGICAL, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert _errors(result) == [
        f"kdist: config error: hydra.run.dir='{run_dir}': holds symbolic links where kdist "
        "writes (history.csv, train.log); kdist does not write through links; remove them, "
        "or choose another hydra.run.dir"
    ]
    assert victim.read_text() == "keep\n"
    assert not (tmp_path / "would-be-created.csv").exists()


def test_the_lock_and_appended_files_never_follow_a_link(tmp_path: Path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock").symlink_to(victim)
    with (
        pytest.raises(ConfigError, match=r"symbolic link at \.lock"),
        run_lock.hold(tmp_path / "run"),
    ):
        pass
    with pytest.raises(ConfigError, match=r"symbolic link at \.lock"):
        run_lock.check_free(tmp_path / "run")
    (tmp_path / "eval.csv").symlink_to(victim)
    for mode in ("a", "w", "r+"):
        with pytest.raises(LinkError, match="is a symbolic link"):
            open_nofollow(tmp_path / "eval.csv", mode)
    assert victim.read_text() == "keep\n"
    with open_nofollow(tmp_path / "plain.csv", "a") as handle:
        handle.write("x\n")
    assert (tmp_path / "plain.csv").read_text() == "x\n"


def test_a_folder_with_files_kdist_does_not_write_is_refused_unless_allowed(tmp_path: Path):
    data = tmp_path / "images"
    (data / "cats").mkdir(parents=True)
    (data / "cats" / "1.png").write_bytes(b"png")
    (data / "labels.txt").write_text("cats\n")
    before = _hashes(data)
    with pytest.raises(ConfigError) as raised:
        accept_run_dir(data, compose([]))
    assert "already holds files kdist does not write (cats, labels.txt)" in str(raised.value)
    assert "trainer.allow_foreign_files=true" in str(raised.value)
    accept_run_dir(data, compose(["trainer.allow_foreign_files=true"]))
    assert _hashes(data) == before
    # kdist's own names, and the hidden names of its atomic writes, are not foreign.
    run_dir = _finished_folder(tmp_path / "run")
    (run_dir / ".metrics.json.x1y2").write_text("")
    (run_dir / ".model.partial-7.keras").write_text("")
    accept_run_dir(run_dir, compose([]))


@pytest.mark.slow
def test_train_into_a_dataset_folder_exits_2_and_leaves_it_alone(tmp_path: Path):
    data = tmp_path / "images"
    (data / "cats").mkdir(parents=True)
    (data / "cats" / "1.png").write_bytes(b"png")
    before = _hashes(data)
    result = run_module("kdist.train", [LOGICAL, f"hydra.run.dir={data}"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert _errors(result) == [
        f"kdist: config error: hydra.run.dir='{data}': already holds files kdist does not "
        "write (cats); a run would mix its outputs into them; choose a new or empty folder, "
        "or trainer.allow_foreign_files=true"
    ]
    assert _hashes(data) == before  # no train.log, no .hydra


# -- resume honours its word ---------------------------------------------------------------


def test_a_folder_without_a_saved_config_is_compared_with_hydra_or_refused(tmp_path: Path):
    run_dir = _finished_folder(tmp_path / "run")
    for folder in ("backup", "checkpoints"):
        (run_dir / folder / "config.yaml").unlink()  # written by an older kdist
    with pytest.raises(ConfigError, match=r"\.hydra/config\.yaml\); changed: optimizer"):
        resume_check.check_resume(run_dir, compose(["optimizer.learning_rate=0.5"]))
    (run_dir / ".hydra" / "config.yaml").unlink()
    with pytest.raises(ConfigError) as raised:
        resume_check.check_resume(run_dir, compose([]))
    assert "holds checkpoints but no saved config" in str(raised.value)
    assert "cannot check that they were trained with these settings" in str(raised.value)
    resume_check.check_resume(run_dir, compose(["trainer.allow_resume_changes=true"]))


def test_a_change_the_optimizer_state_cannot_take_is_refused(tmp_path: Path):
    run_dir = _finished_folder(tmp_path / "run")
    allow = "trainer.allow_resume_changes=true"
    for change, key in (
        (["optimizer=sgd"], "optimizer._target_"),
        (["optimizer.schedule=cosine"], "optimizer.schedule"),
        (["optimizer.warmup_steps=3"], "optimizer.schedule"),
        (["runtime.mixed_precision=mixed_float16"], "runtime.mixed_precision"),
    ):
        with pytest.raises(ConfigError) as raised:
            resume_check.check_resume(run_dir, compose([*change, allow]))
        assert str(raised.value).startswith(f"{key}="), raised.value
        assert "cannot change on resume" in str(raised.value)
    resume_check.check_resume(run_dir, compose(["optimizer.learning_rate=0.5", allow]))


def test_an_allowed_learning_rate_is_set_again_after_the_restore(tmp_path: Path):
    import keras

    run_dir = _finished_folder(tmp_path / "run")
    optimizer = keras.optimizers.Adam(0.5)
    configured = resume_check.optimizer_hyperparameters(optimizer)
    assert configured == {"learning_rate": 0.5}
    optimizer.learning_rate.assign(0.001)  # what a restore does
    # Not accepted as a change: the restored rate stays (a callback may have lowered it).
    unchanged = resume_check.check_resume(run_dir, compose([]))
    assert unchanged == []
    assert resume_check.apply_allowed_changes(unchanged, optimizer, configured) == []
    assert float(optimizer.learning_rate) == pytest.approx(0.001)
    changed = resume_check.check_resume(
        run_dir, compose(["optimizer.learning_rate=0.5", "trainer.allow_resume_changes=true"])
    )
    assert changed == ["optimizer.learning_rate"]
    applied = resume_check.apply_allowed_changes(changed, optimizer, configured)
    assert applied == ["optimizer.learning_rate"]
    assert float(optimizer.learning_rate) == pytest.approx(0.5)


@pytest.mark.slow
def test_a_resume_with_an_allowed_learning_rate_trains_at_it(tmp_path: Path):
    """Train 1 epoch, resume for 1 more at 0.5 and at the old rate (about 30 s)."""
    import kdist

    base = ["trainer=fast_dev", "trainer.verbose=0", "runtime.deterministic=true"]
    first = tmp_path / "first"
    kdist.Experiment(compose([*base, "trainer.epochs=1"]), run_dir=first).fit()
    resume_check.save_config(first, compose([*base, "trainer.epochs=1"]))
    losses = {}
    for rate in (None, 0.5):
        run_dir = tmp_path / f"rate-{rate}"
        shutil.copytree(first, run_dir)
        more = [*base, "trainer.epochs=2", "trainer.allow_resume_changes=true"]
        if rate is not None:
            more.append(f"optimizer.learning_rate={rate}")
        cfg = compose(more)
        resume_check.check_resume(run_dir, cfg)
        exp = kdist.Experiment(cfg, run_dir=run_dir)
        history = exp.fit()
        assert exp.optimizer is not None
        expected = 0.001 if rate is None else 0.5
        assert float(exp.optimizer.learning_rate) == pytest.approx(expected)
        assert history.epoch == [1]  # resumed: the second epoch only
        losses[rate] = history.history["loss"][-1]
    assert not np.isclose(losses[None], losses[0.5], rtol=1e-3), losses
