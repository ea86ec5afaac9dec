"""A run folder someone else wrote: bombs, damaged files and full disks (issue 52).

Each file kdist reads back from a run folder is read within a limit, and a damaged one is
refused in one line naming the file and what to do (or read with replacement where it is
only informational), and a full disk is named as one. Cost: the in-process cases take a
second or two, the few that train `trainer=fast_dev` 5-10 s; the command line's full disk
(a `kdist.train` subprocess, ~30 s) is `slow`. No case needs more than ~40 MiB of memory.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import pytest

from kdist.config import ConfigError
from kdist.evaluation import export
from kdist.runs import fileio

# -- case 2: a zip bomb in model.keras ------------------------------------------------------


def _keras_archive(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _declare(path: Path, member: str, size: int) -> None:
    """Make the archive's headers say `member` inflates to `size` bytes (its data as was)."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    for signature, offset in ((b"PK\x01\x02", 24), (b"PK\x03\x04", 22)):
        start = 0
        while (at := data.find(signature, start)) >= 0:
            start = at + 4
            name_at = at + (46 if signature == b"PK\x01\x02" else 30)
            if data[name_at : name_at + len(name)] == name:
                data[at + offset : at + offset + 4] = struct.pack("<I", size)
    path.write_bytes(bytes(data))


def _one_line(error: pytest.ExceptionInfo, path: Path) -> str:
    text = str(error.value)
    assert "\n" not in text and text.startswith(f"{path}: "), text
    return text


def test_a_config_json_that_inflates_past_the_default_limit_is_refused(tmp_path):
    # 40 MiB of JSON from ~40 KB on disk, over the real default (32 MiB).
    size = 40 * 2**20
    config = b'{"class_name": "Sequential", "pad": "' + b" " * size + b'"}'
    path = _keras_archive(tmp_path / "model.keras", {"config.json": config})
    assert path.stat().st_size < 200_000
    with pytest.raises(ConfigError) as error:
        export.load_model(path)
    text = _one_line(error, path)
    assert export.MAX_CONFIG_BYTES <= 64 * 2**20  # the default is bounded
    assert "config.json in the archive declares" in text
    assert f"the limit is {export.MAX_CONFIG_BYTES} bytes" in text


def test_a_member_that_declares_gigabytes_is_refused_before_any_read(tmp_path, monkeypatch):
    # The headers of a 1 KB file say its config holds 4,000,000,000 bytes (as a bomb's do).
    path = _keras_archive(tmp_path / "model.keras", {"config.json": b"{}" * 500})
    _declare(path, "config.json", 4_000_000_000)
    opened = []
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda *a, **k: opened.append(a) or 1 / 0)
    with pytest.raises(ConfigError) as error:
        export.load_model(path)
    assert "declares 4000000000 bytes" in _one_line(error, path)
    assert opened == []  # nothing was inflated


def test_a_weights_member_far_larger_than_its_compressed_size_is_refused(tmp_path):
    path = _keras_archive(
        tmp_path / "model.keras",
        {"config.json": b"{}", "metadata.json": b"{}", "model.weights.h5": b"\0" * 4096},
    )
    _declare(path, "model.weights.h5", export.BOMB_FLOOR_BYTES + 1)
    with pytest.raises(ConfigError) as error:
        export.load_model(path)
    text = _one_line(error, path)
    assert "model.weights.h5 in the archive declares" in text
    assert f"{export.MAX_EXPANSION} times" in text


def test_the_bytes_actually_inflated_are_capped_too(tmp_path):
    path = _keras_archive(tmp_path / "model.keras", {"config.json": b" " * 10_000})
    with zipfile.ZipFile(path) as archive, pytest.raises(ConfigError) as error:
        export._read_member(archive, "config.json", 1000)
    assert "inflates past the limit of 1000 bytes" in str(error.value)


def test_evaluate_refuses_the_bomb_in_one_line(tmp_path):
    from helpers import compose
    from omegaconf import OmegaConf

    from kdist.evaluation.reopen import evaluate_run

    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    cfg = compose(["trainer=fast_dev", f"run_dir={run_dir}"])
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    path = _keras_archive(run_dir / "model.keras", {"config.json": b"{}"})
    _declare(path, "config.json", 3 * 2**30)
    with pytest.raises(ConfigError) as error:
        evaluate_run(run_dir)
    assert "config.json in the archive declares" in _one_line(error, path)


# -- bounded JSON and CSV reads --------------------------------------------------------------


def test_json_and_csv_files_of_a_run_folder_are_read_within_a_limit(tmp_path):
    assert fileio.MAX_READ_BYTES <= 2**30  # the default is bounded
    big = tmp_path / "history.csv"
    big.write_text("epoch,loss\n" + "0,1.0\n" * 300)
    with pytest.raises(ConfigError) as error:
        fileio.read_csv(big, limit=1000)
    assert "the limit is 1000 bytes" in _one_line(error, big)
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"steps": 20, "pad": "x" * 2000}))
    with pytest.raises(ConfigError, match="the limit is 1000 bytes"):
        fileio.read_json(metrics, limit=1000)
    assert fileio.read_json(metrics)["steps"] == 20


def test_the_json_files_of_sweeps_and_searches_are_read_within_the_limit(tmp_path, monkeypatch):
    from kdist.runs import sweep
    from kdist.tuning import results

    record = tmp_path / results.RECORD
    record.write_text(json.dumps({"steps": 20, "pad": "x" * 2000}))
    assert sweep._read_json(record)["steps"] == 20
    assert results.read_record(tmp_path)["steps"] == 20
    monkeypatch.setattr(fileio, "MAX_READ_BYTES", 1000)
    assert sweep._read_json(record) == {}  # as an unreadable file: nothing read past 1000
    assert results.read_record(tmp_path) == {}


# -- case 3: a damaged checkpoint state file -------------------------------------------------

STATE_FILES = {"random": bytes(range(256))[::-1] * 2, "empty": b""}


@pytest.mark.parametrize("kind", sorted(STATE_FILES))
def test_a_damaged_checkpoint_state_file_is_set_aside_and_the_run_saves(tmp_path, kind, caplog):
    import tensorflow as tf
    from helpers import compose

    import kdist

    for folder in ("backup", "checkpoints"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "checkpoint").write_bytes(STATE_FILES[kind])
    exp = kdist.Experiment(compose(["trainer=fast_dev", "trainer.verbose=0"]), run_dir=tmp_path)
    with caplog.at_level("WARNING", logger="kdist.engine.checkpoint.saver"):
        exp.fit()
    for folder in ("backup", "checkpoints"):
        state = tf.train.get_checkpoint_state(str(tmp_path / folder))
        assert state is not None and state.model_checkpoint_path.endswith("ckpt-10")
        (aside,) = (tmp_path / folder).glob("checkpoint.unreadable-*")
        assert aside.read_bytes() == STATE_FILES[kind]
        said = [r.getMessage() for r in caplog.records if str(aside) in r.getMessage()]
        assert len(said) == 1 and said[0].startswith(f"{tmp_path / folder / 'checkpoint'} is ")
        assert "\n" not in said[0]


# -- case 4: a truncated backup/config.yaml --------------------------------------------------


def _saved_run(run_dir: Path) -> Path:
    from helpers import compose

    from kdist.runs import resume_check

    resume_check.save_config(run_dir, compose(["trainer=fast_dev"]))
    (run_dir / "backup" / "ckpt-10.index").write_bytes(b"index")
    return run_dir / "backup" / "config.yaml"


@pytest.mark.parametrize("cut", ["inside a key", "after a key", "at the start"])
def test_a_truncated_saved_config_is_named_in_one_line_with_what_to_do(tmp_path, cut):
    from helpers import compose

    from kdist.runs import resume_check

    saved = _saved_run(tmp_path)
    text = saved.read_text()
    at = {
        "inside a key": text.index("\n  lr_scaling") + 5,  # `  lr_` : not YAML
        "after a key": text.index("trainer:") + 20,  # YAML, cut short of its end
        "at the start": 0,
    }[cut]
    saved.write_text(text[:at])
    with pytest.raises(ConfigError) as error:
        resume_check.check_resume(tmp_path, compose(["trainer=fast_dev"]))
    message = str(error.value)
    assert "\n" not in message, message
    assert message.startswith(f"hydra.run.dir='{tmp_path}': holds checkpoints whose saved ")
    assert f"config {saved} is damaged" in message
    assert f"remove {saved.parent} to resume from the run's other saves" in message


# -- case 5: bytes that are not UTF-8 in history.csv -----------------------------------------


def test_a_history_with_bytes_that_are_not_utf8_is_read_with_replacement(tmp_path):
    from kdist.runs.plots import history_figure

    history = tmp_path / "history.csv"
    history.write_bytes(b"epoch,loss,val_\xff\xfeloss\n0,1.5,2.0\n1,1.\xff0,1.9\n2,0.5,1.8\x00\n")
    rows = fileio.read_csv(history)
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    assert rows[1]["loss"] == "1.\ufffd0"
    numbers = fileio.read_csv_numbers(history)
    assert numbers[0] == {"epoch": 0.0, "loss": 1.5, "val_\ufffd\ufffdloss": 2.0}
    assert "loss" not in numbers[1]  # the damaged cell is left out, not a crash
    history_figure(history)  # the plots read it too


def test_a_resumed_run_appends_to_a_history_with_bytes_that_are_not_utf8(tmp_path, caplog):
    from helpers import compose

    import kdist

    base = ["trainer=fast_dev", "trainer.verbose=0"]
    kdist.Experiment(compose(base), run_dir=tmp_path).fit()
    history = tmp_path / "history.csv"
    damaged = history.read_bytes().replace(b"0.", b"0.\xff", 1)
    history.write_bytes(damaged)
    exp = kdist.Experiment(compose([*base, "trainer.epochs=3"]), run_dir=tmp_path)
    with caplog.at_level("WARNING", logger="kdist.callbacks.curves"):
        exp.fit()
    text = history.read_bytes()
    assert text.startswith(damaged) and text.count(b"\n") == 4  # header, 2 rows, 1 new
    assert [r["epoch"] for r in fileio.read_csv(history)] == ["0", "1", "2"]
    (said,) = [r.getMessage() for r in caplog.records if "not UTF-8" in r.getMessage()]
    assert said.startswith(f"{history} holds bytes that are not UTF-8")


# -- case 6: a full disk ---------------------------------------------------------------------


def _full_disk_write():
    """A traced write that fails as a full disk does: TensorFlow's own ENOSPC, from
    `/dev/full` (no privileges needed): 'ResourceExhaustedError: Graph execution error'."""
    import tensorflow as tf

    @tf.function
    def write(prefix=None):
        tf.io.write_file("/dev/full", tf.strings.join(["x"] * 4096))

    return write


def _says_disk_full(text: str, *folders: Path, needed: bool = True) -> None:
    assert "\n" not in text and "Graph execution error" not in text, text
    said = [f"the disk holding {f} is full (no space left writing /dev/full" for f in folders]
    assert any(s in text for s in said), text
    assert ("free there, the save needs about " in text) == needed, text


def test_a_full_disk_at_an_asynchronous_save_says_so(tmp_path, monkeypatch):
    from helpers import compose

    import kdist
    from kdist.engine.checkpoint import CheckpointWriteError, host_copies

    full = _full_disk_write()
    monkeypatch.setattr(host_copies.HostCopies, "write", property(lambda self: full))
    exp = kdist.Experiment(compose(["trainer=fast_dev", "trainer.verbose=0"]), run_dir=tmp_path)
    with pytest.raises(CheckpointWriteError) as error:
        exp.fit()
    _says_disk_full(str(error.value), tmp_path / "backup", tmp_path / "checkpoints")


def test_a_full_disk_at_a_synchronous_save_says_so(tmp_path, monkeypatch):
    import tensorflow as tf
    from helpers import compose

    import kdist
    from kdist.engine.checkpoint import CheckpointWriteError, PeriodicCheckpoint

    exp = kdist.Experiment(compose(["trainer=fast_dev", "trainer.verbose=0"]), run_dir=tmp_path)
    exp.build_model()
    assert exp.controller is not None
    saver = PeriodicCheckpoint(
        model=exp.controller.model,
        checkpoint=exp.controller.checkpoint,
        state=exp.controller.state,
        directory=tmp_path / "sync",
        every_n_steps=0,
        keep=2,
        asynchronous=False,
    )
    full = _full_disk_write()
    monkeypatch.setattr(tf.train.CheckpointManager, "save", lambda self, **kw: full())
    with pytest.raises(CheckpointWriteError) as error:
        saver.save(3)
    _says_disk_full(str(error.value), tmp_path / "sync")


@pytest.mark.parametrize("writer", ["atomic_path", "atomic_directory"])
def test_a_full_disk_writing_the_runs_exports_says_so(tmp_path, writer):
    import errno

    # model.keras and saved_model/ are written through these; TensorFlow's ENOSPC inside.
    with pytest.raises(OSError) as error, getattr(fileio, writer)(tmp_path / "model.keras"):
        _full_disk_write()()
    assert error.value.errno == errno.ENOSPC
    assert error.value.filename == str(tmp_path / "model.keras")
    _says_disk_full(str(error.value), tmp_path, needed=False)
    assert list(tmp_path.iterdir()) == []  # nothing half-written left


def test_a_full_disk_on_the_command_line_is_one_line_and_exit_6(tmp_path):
    import os
    import subprocess
    import sys

    from kdist.process.exit_codes import EXIT_WRITE_FAILED

    driver = tmp_path / "full_disk.py"
    driver.write_text(
        "import runpy, sys\n"
        "import tensorflow as tf\n"
        "from kdist.engine.checkpoint import host_copies\n"
        "@tf.function\n"
        "def full(prefix=None):\n"
        "    tf.io.write_file('/dev/full', tf.strings.join(['x'] * 4096))\n"
        "host_copies.HostCopies.write = property(lambda self: full)\n"
        "sys.argv = ['kdist.train', *sys.argv[1:]]\n"
        "runpy.run_module('kdist.train', run_name='__main__')\n"
    )
    run_dir = tmp_path / "run"
    args = ["trainer=fast_dev", "trainer.verbose=0", f"hydra.run.dir={run_dir}"]
    result = subprocess.run(
        [sys.executable, str(driver), *args],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == EXIT_WRITE_FAILED, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("kdist:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith("kdist: write error: the disk holding "), errors[0]
    _says_disk_full(errors[0], run_dir / "backup", run_dir / "checkpoints")
    assert "Traceback" not in result.stderr


def test_a_resume_trims_a_history_whose_epoch_cells_are_damaged(tmp_path):
    from kdist.experiment.outputs import trim_history

    history = tmp_path / "history.csv"
    history.write_bytes(b"epoch,loss\n0,1.5\n\xff1,1.2\n2,1.0\n3,0.9\n")
    trim_history(tmp_path, 2)  # the resumed run redoes epochs 2 and 3
    assert [r["epoch"] for r in fileio.read_csv(history)] == ["0", "\ufffd1"]


@pytest.mark.parametrize("kind", sorted(STATE_FILES))
def test_a_damaged_state_file_does_not_stop_a_restore_with_optional_parts(tmp_path, kind):
    import tensorflow as tf

    from kdist.engine.checkpoint.parts import Part, restore_parts

    for folder in ("backup", "checkpoints"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "checkpoint").write_bytes(STATE_FILES[kind])
    state, residuals = tf.Module(), tf.Module()
    state.steps, residuals.values = tf.Variable(3), [tf.Variable(1.0)]
    read = []
    parts = [
        Part("state", state),
        Part("allreduce_residuals", residuals, restore=lambda path, names: read.append(path)),
    ]
    # No checkpoint beside the damaged state files: a fresh start, the parts untouched.
    assert restore_parts(parts, tmp_path / "backup", tmp_path / "checkpoints", model=None) is None
    assert read == [] and int(state.steps.numpy()) == 3


def _tensorboard_on_a_full_disk(monkeypatch):
    """TensorBoard's epoch write fails as its event file on a full disk does: TensorFlow's
    `ResourceExhaustedError` naming the file (here `/dev/full`), not an `OSError`."""
    from kdist.callbacks.tensorboard import EpochTensorBoard

    full = _full_disk_write()

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1:
            full()

    monkeypatch.setattr(EpochTensorBoard, "on_epoch_end", on_epoch_end)


def test_a_full_disk_under_tensorboard_is_named_in_a_notebook(tmp_path, monkeypatch):
    import errno

    import tensorflow as tf
    from helpers import compose

    import kdist
    from kdist.runs.disk_full import DiskFullError

    _tensorboard_on_a_full_disk(monkeypatch)
    overrides = ["trainer=fast_dev", "trainer.epochs=3", "trainer.verbose=0"]
    exp = kdist.Experiment(compose(overrides), run_dir=tmp_path)
    with pytest.raises(DiskFullError) as error:
        exp.fit()
    assert error.value.errno == errno.ENOSPC
    assert isinstance(error.value.__cause__, tf.errors.ResourceExhaustedError)
    _says_disk_full(str(error.value), Path("/dev"), needed=False)


def test_named_disk_full_leaves_other_errors_and_named_ones_alone(tmp_path):
    import errno

    from kdist.runs.disk_full import disk_full_error, named_disk_full

    assert named_disk_full(ValueError("bad"), tmp_path) is None
    named = disk_full_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "f")
    assert named_disk_full(named, tmp_path) is None
    # h5py's words without an errno or a file: the folder given is named.
    said = named_disk_full(RuntimeError("Can't write data (No space left on device)"), tmp_path)
    assert said is not None and said.errno == errno.ENOSPC
    assert f"the disk holding {tmp_path} is full (no space left writing a file" in str(said)


def test_a_full_disk_under_tensorboard_on_the_command_line_is_one_line_and_exit_6(tmp_path):
    import os
    import subprocess
    import sys

    from kdist.process.exit_codes import EXIT_WRITE_FAILED

    driver = tmp_path / "full_disk.py"
    driver.write_text(
        "import runpy, sys\n"
        "import tensorflow as tf\n"
        "from kdist.callbacks.tensorboard import EpochTensorBoard\n"
        "@tf.function\n"
        "def full():\n"
        "    tf.io.write_file('/dev/full', tf.strings.join(['x'] * 4096))\n"
        "def on_epoch_end(self, epoch, logs=None):\n"
        "    if epoch == 1:\n"
        "        full()\n"
        "EpochTensorBoard.on_epoch_end = on_epoch_end\n"
        "sys.argv = ['kdist.train', *sys.argv[1:]]\n"
        "runpy.run_module('kdist.train', run_name='__main__')\n"
    )
    run_dir = tmp_path / "run"
    args = ["trainer=fast_dev", "trainer.epochs=3", "trainer.verbose=0", f"hydra.run.dir={run_dir}"]
    result = subprocess.run(
        [sys.executable, str(driver), *args],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == EXIT_WRITE_FAILED, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("kdist:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith("kdist: write error: the disk holding /dev is full"), errors[0]
    # The callbacks run before the savers: epoch 1's failed write leaves epoch 0's save.
    assert errors[0].endswith("the newest checkpoint, step 5, is intact"), errors[0]
    assert "Traceback" not in result.stderr


def test_named_disk_full_keeps_kdists_own_named_errors(tmp_path):
    from kdist.engine.checkpoint import CheckpointWriteError
    from kdist.runs.disk_full import disk_full_message, named_disk_full

    said = disk_full_message(RuntimeError("/x/y; No space left on device"), tmp_path, needed=9)
    assert named_disk_full(CheckpointWriteError(said), tmp_path) is None
