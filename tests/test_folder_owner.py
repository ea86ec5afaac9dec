"""One owner per run folder, and a refused run leaves the folder as it was (issue 52).

Each case is made deterministic: the other owner is a helper process that holds the
folder's lock at a chosen moment, not a race that passes by luck.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import run_module

from kdist.process.exit_codes import EXIT_CONFIG_ERROR

# A process that holds `sys.argv[1]`'s lock, makes the folder's train.log as a starting
# run does (Hydra opens it empty), says "ready" and holds on until its stdin closes.
_OWNER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from kdist.runs import lock
    folder = Path(sys.argv[1])
    with lock.hold(folder):
        (folder / "train.log").touch()
        print("ready", flush=True)
        sys.stdin.read()
    """
)


def _start_owner(folder: Path) -> subprocess.Popen:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    assert owner.stdout.readline().strip() == "ready"  # ends if the owner dies
    return owner


def _stop(owner: subprocess.Popen) -> None:
    assert owner.stdin is not None
    owner.stdin.close()
    try:
        owner.wait(timeout=30)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(timeout=30)
        if owner.stdout is not None:
            # Left open, the pipe is closed by the garbage collector during a later test,
            # which pytest then fails on a ResourceWarning (make test-all, issue 52).
            owner.stdout.close()


def _hashes(root: Path) -> dict[str, str]:
    """Every entry under `root` with its content's hash (folders as "/")."""
    return {
        str(path.relative_to(root)): (
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "/"
        )
        for path in sorted(root.rglob("*"))
    }


# `kdist train`, with its pre-Hydra check passed before the other owner starts: the
# moment two commands started together meet (both checked a free folder, one wins).
_TRAIN_AFTER_OWNER = textwrap.dedent(
    """
    import subprocess, sys
    import kdist.train as train
    owner_code, folder = sys.argv[1], sys.argv[2]
    checked = train.precheck

    def precheck(argv, **kwargs):
        cfg = checked(argv, **kwargs)
        # Another run takes the folder between the run's checks and its job.
        owner = subprocess.Popen(
            [sys.executable, "-c", owner_code, folder],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        out, err = owner.communicate(timeout=120)
        taken = out.strip() == "ready"
        print(f"owner exit {owner.returncode} took {taken} in_use {'is in use' in err}",
              file=sys.stderr, flush=True)
        return cfg

    train.precheck = precheck
    sys.argv = ["kdist train", f"hydra.run.dir={folder}", "trainer=fast_dev"]
    train.main()
    """
)


def test_a_run_holds_its_folder_from_its_checks_on(tmp_path: Path):
    """Two `kdist train hydra.run.dir=Z` started together: the second took the folder
    between the first's checks and its job (and the refused one then deleted the winner's
    still-empty train.log). The folder's lock is now taken with the checks and held for
    the run (`kdist.train.precheck`): the other one is refused, the run trains."""
    folder = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-c", _TRAIN_AFTER_OWNER, _OWNER, str(folder)],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "owner exit 1 took False in_use True" in result.stderr, result.stderr[-3000:]
    assert "trained" in (folder / "train.log").read_text()


def test_a_refused_run_leaves_the_owners_train_log_alone(tmp_path: Path):
    """A run refused because another holds the folder leaves the owner's (still empty)
    train.log as it is."""
    folder = tmp_path / "run"
    folder.mkdir()
    owner = _start_owner(folder)
    try:
        result = run_module(
            "kdist.train", [f"hydra.run.dir={folder}", "trainer=fast_dev"], cwd=tmp_path
        )
        assert result.returncode == EXIT_CONFIG_ERROR, result.stderr[-3000:]
        assert f"is in use by another kdist run (pid {owner.pid} on" in result.stderr
        assert (folder / "train.log").is_file(), "the refused run removed the owner's train.log"
        assert (folder / "train.log").read_text() == ""  # nor wrote in it
    finally:
        _stop(owner)


def _finished_folder(run_dir: Path) -> Path:
    """A run folder as a finished run leaves it (config, checkpoints, log, metrics)."""
    from omegaconf import OmegaConf

    from kdist.config.compose import compose
    from kdist.runs import resume_check

    cfg = compose([])
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (run_dir / ".hydra" / "hydra.yaml").write_text("hydra: {}\n")
    (run_dir / ".hydra" / "overrides.yaml").write_text("[]\n")
    resume_check.save_config(run_dir, cfg)
    (run_dir / "backup" / "ckpt-22.index").write_bytes(b"index")
    (run_dir / "backup" / "ckpt-22.data-00000-of-00001").write_bytes(b"data")
    (run_dir / "train.log").write_text("10:00:00 INFO trained 22 steps\n")
    (run_dir / "metrics.json").write_text('{"steps": 22}\n')
    (run_dir / ".lock").write_text("")
    return run_dir


def test_a_resume_refused_after_the_strategy_is_built_leaves_every_byte(tmp_path: Path):
    """`strategy=auto` finds one device, and `strategy.sync.mode=diloco` needs replicas: a
    refusal that comes once the run holds its folder. It rewrote `.hydra/*.yaml`,
    `backup/config.yaml` and `checkpoints/config.yaml` and appended to train.log."""
    run_dir = _finished_folder(tmp_path / "run")
    before = _hashes(run_dir)
    result = run_module(
        "kdist.train",
        [
            f"hydra.run.dir={run_dir}",
            "trainer.epochs=2",
            "strategy=auto",
            "strategy.sync.mode=diloco",
            # One device, whatever the machine: `auto` picks one_device.
            "runtime.logical_devices=1",
        ],
        cwd=tmp_path,
        env={"CUDA_VISIBLE_DEVICES": ""},
        timeout=300,
    )
    assert result.returncode == EXIT_CONFIG_ERROR, result.stderr[-3000:]
    assert "kdist: config error: strategy.sync.mode='diloco'" in result.stderr
    assert _hashes(run_dir) == before


def test_a_notebook_fit_beside_a_command_line_run_is_refused_then_owns_the_folder(
    tmp_path: Path, tiny: list[str]
):
    """`Experiment(compose(["run_dir=W", ...])).fit()` beside `kdist train
    hydra.run.dir=W` resumed from its backup and trained beside it (the command line run
    then died with exit 6). The notebook takes the folder's lock for the length of `fit`."""
    import pytest

    import kdist
    from kdist.config.errors import ConfigError
    from kdist.runs import lock

    folder = tmp_path / "run"
    folder.mkdir()
    owner = _start_owner(folder)  # holds the lock as `kdist train` does
    try:
        exp = kdist.Experiment(kdist.compose(tiny))
        before = _hashes(folder)
        with pytest.raises(ConfigError) as raised:
            exp.fit()
        assert str(raised.value).startswith(
            f"run_dir='{folder}': is in use by another kdist run (pid {owner.pid} on "
        )
        assert "choose another run_dir" in str(raised.value)
        assert _hashes(folder) == before  # no backup read, no file written
    finally:
        _stop(owner)
    history = exp.fit()
    assert len(history.epoch) == 2
    _Fails = _fails_on_train_begin()
    lock.check_free(folder)  # released when fit returned
    assert lock.recorded_kind(folder) is None and (folder / "model.keras").is_file()
    # Released on an error too; a second fit of the same Experiment owns it again.
    with pytest.raises(RuntimeError, match="a callback's own error"):
        exp.fit(epochs=3, initial_epoch=2, callbacks=[_Fails()])
    lock.check_free(folder)
    again = exp.fit(epochs=3, initial_epoch=2)
    assert again.epoch == [2]
    lock.check_free(folder)


def _fails_on_train_begin():
    import keras

    class Fails(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            raise RuntimeError("a callback's own error")

    return Fails


def test_a_command_line_run_refuses_a_folder_a_notebook_is_fitting(tmp_path: Path):
    """While `Experiment.fit` runs, the folder's lock names the notebook's process."""
    import keras

    import kdist
    from kdist.config.errors import ConfigError
    from kdist.runs import lock

    folder = tmp_path / "run"
    exp = kdist.Experiment(kdist.compose(["trainer=fast_dev", "trainer.verbose=0"]), run_dir=folder)
    seen: list[str] = []

    class _Look(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            try:
                lock.check_free(folder)
            except ConfigError as error:
                seen.append(str(error))

    exp.fit(callbacks=[_Look()])
    assert seen and f"(pid {os.getpid()} on " in seen[0]


def _config_only_folder(run_dir: Path) -> Path:
    """A run folder with its config and lock file: what predict and the sidecar read
    before they take its lock."""
    from omegaconf import OmegaConf

    from kdist.config.compose import compose

    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(compose([])))
    (run_dir / ".lock").write_text("")
    return run_dir


def _make_read_only(folder: Path) -> None:
    """chmod a-w; where that does not stop this process (root), the immutable attribute;
    skipped where neither can (root without CAP_LINUX_IMMUTABLE)."""
    import pytest

    for path in [*folder.rglob("*"), folder]:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        (folder / ".probe").touch()
    except PermissionError:
        return
    (folder / ".probe").unlink()
    made = subprocess.run(["chattr", "-R", "+i", str(folder)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip("running as root: chmod does not stop it and chattr +i is refused")


def _make_writable(folder: Path) -> None:
    subprocess.run(["chattr", "-R", "-i", str(folder)], capture_output=True, check=False)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)


def test_predict_and_the_sidecar_on_a_read_only_folder_say_so_in_one_line(tmp_path, capsys):
    """`kdist predict` and `kdist evaluate watch=true` on a read-only run folder failed with
    an OSError traceback on the lock file."""
    import pytest

    from kdist import evaluate, predict

    folder = _config_only_folder(tmp_path / "run")
    before = _hashes(folder)
    _make_read_only(folder)
    try:
        with pytest.raises(SystemExit) as raised:
            predict.main([f"run_dir={folder}"])
        assert raised.value.code == EXIT_CONFIG_ERROR
        line = capsys.readouterr().err.strip()
        assert line.startswith(f"kdist: config error: run_dir='{folder}': is read-only: ")
        assert line.endswith(
            "copy the folder somewhere writable, or write elsewhere with output=PATH"
        )
        with pytest.raises(SystemExit) as raised:
            evaluate.main([f"run_dir={folder}", "watch=true", "timeout=60"])
        assert raised.value.code == EXIT_CONFIG_ERROR
        line = capsys.readouterr().err.strip()
        assert line.startswith(f"kdist: config error: run_dir='{folder}': is read-only: .eval.lock")
        assert line.endswith("copy the folder somewhere writable and give run_dir=<the copy>")
    finally:
        _make_writable(folder)
    assert _hashes(folder) == before


def test_a_lock_file_that_cannot_be_written_is_a_config_error(tmp_path, monkeypatch):
    """The message path itself, wherever the test runs (root or not)."""
    import errno

    import pytest

    from kdist.config.errors import ConfigError
    from kdist.runs import lock

    real_open = os.open

    def refuse(path, flags, *args):
        if str(path).endswith(".lock"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(lock.os, "open", refuse)
    with pytest.raises(ConfigError) as raised, lock.hold(tmp_path, key="run_dir"):
        pass
    assert str(raised.value) == (
        f"run_dir='{tmp_path}': is read-only: .lock cannot be written there "
        "(Read-only file system); copy the folder somewhere writable and give "
        "run_dir=<the copy>"
    )


def test_a_refused_run_leaves_a_killed_runs_lock_file_as_it_was(tmp_path: Path, monkeypatch):
    # Found by test_chaos in a fresh clone's make test-all: a run killed while it held the
    # folder leaves its pid in `.lock`; a rerun refused (its checkpoints were trained with
    # other settings) took the lock and left the file emptied.
    import contextlib

    import pytest

    from kdist.config import ConfigError
    from kdist.run_setup import RunSetup, take_run_dir
    from kdist.runs.lock import LOCK_NAME

    lock_file = tmp_path / LOCK_NAME
    lock_file.write_bytes(b"999999 deadhost\n")  # no such process: the lock is free

    def refuse(self, run_dir):
        raise ConfigError("hydra.run.dir", "holds checkpoints trained with other settings")

    monkeypatch.setattr(RunSetup, "checked_in", refuse)
    with contextlib.ExitStack() as held, pytest.raises(ConfigError):
        take_run_dir(tmp_path, object.__new__(RunSetup), held)
    assert lock_file.read_bytes() == b"999999 deadhost\n"
