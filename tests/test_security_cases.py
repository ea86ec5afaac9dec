"""The probe's list of cases (issue 31): each ends with its exit status and one line.

Cost: about 10 s fast (two short in-process runs of `trainer=fast_dev`); the cases that
train twice or write data files are `slow`.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import compose, learnable_arrays

import kdist
from kdist.callbacks import checkpoint as checkpoint_module
from kdist.callbacks import preemption
from kdist.train import run

FAST = ["trainer=fast_dev", "trainer.verbose=0", "callbacks.curves=false"]


@pytest.fixture(autouse=True)
def _no_ctrl_c_saving(monkeypatch):
    # `run` turns Ctrl-C saving on for the process; keep it off for the other tests.
    monkeypatch.setattr(preemption, "_SAVE_ON_CTRL_C", False)


def _stopped(cfg, capsys) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as stopped:
        run(cfg)
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line]
    return int(stopped.value.code), err


def _indexes(folder: Path) -> list[int]:
    return sorted(int(p.name[5:-6]) for p in folder.glob("ckpt-*.index"))


def test_an_infinite_learning_rate_says_no_backup_was_saved(tmp_path: Path, capsys):
    cfg = compose([*FAST, f"run_dir={tmp_path}", "optimizer.learning_rate=inf"])
    code, err = _stopped(cfg, capsys)
    assert code == 3
    assert len(err) == 1, err
    assert err[0].startswith("kdist: error: training loss is nan after step ")
    assert err[0].endswith(
        "stopped without saving this state (no backup was saved before it: a re-run starts afresh)"
    )
    assert _indexes(tmp_path / "backup") == []


def test_a_full_disk_is_one_line_status_6_and_no_temp_folder(tmp_path: Path, capsys, monkeypatch):
    write = checkpoint_module._HostWriter.write
    calls = []

    def full(self, prefix: str) -> None:
        calls.append(prefix)
        if len(calls) > 1:  # the first backup is written; the disk is full after it
            Path(f"{prefix}_temp").mkdir(exist_ok=True)  # what a cut save leaves
            raise OSError(errno.ENOSPC, "No space left on device", prefix)
        write(self, prefix)

    monkeypatch.setattr(checkpoint_module._HostWriter, "write", full)
    cfg = compose([*FAST, f"run_dir={tmp_path}", "callbacks.backup.every_n_steps=2"])
    code, err = _stopped(cfg, capsys)
    assert code == 6
    assert len(err) == 1, err
    assert err[0].startswith("kdist: write error: an asynchronous checkpoint save failed: ")
    assert "No space left on device" in err[0]
    assert err[0].endswith("; the newest backup, step 2, is intact")
    assert not list(tmp_path.rglob("*_temp*"))
    assert _indexes(tmp_path / "backup") == [2]


@pytest.mark.slow
def test_a_corrupt_newest_backup_linked_to_checkpoints_falls_back(tmp_path: Path, caplog):
    overrides = [
        *FAST,
        "callbacks.checkpoint.every_n_steps=2",
        "callbacks.backup.every_n_steps=5",
        "callbacks.backup.keep=1",
    ]
    kdist.Experiment(compose(overrides), run_dir=tmp_path).fit()
    assert _indexes(tmp_path / "backup") == [10]
    assert _indexes(tmp_path / "checkpoints") == [6, 8, 10]
    newest = tmp_path / "backup" / "ckpt-10.data-00000-of-00001"
    linked = tmp_path / "checkpoints" / "ckpt-10.data-00000-of-00001"
    assert newest.stat().st_ino == linked.stat().st_ino  # one save, hard-linked
    data = bytearray(newest.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    newest.write_bytes(bytes(data))  # through the link: both are corrupt
    again = kdist.Experiment(compose([*overrides, "trainer.epochs=3"]), run_dir=tmp_path)
    with caplog.at_level("WARNING"):
        assert again.restore() == 8
    assert "resuming from checkpoint" in caplog.text and "ckpt-8" in caplog.text


@pytest.mark.slow
def test_a_flipped_tfrecord_byte_is_a_data_error_with_one_line(tmp_path: Path, capsys):
    from kdist.data.tfrecord_io import write_tfrecords

    x, y = learnable_arrays(90)
    root = tmp_path / "data"
    write_tfrecords(root, {"train": (x, y), "validation": (x[:30], y[:30])})
    victim = next(root.glob("train-*.tfrecord"))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    cfg = compose(
        [
            *FAST,
            f"run_dir={tmp_path / 'run'}",
            "data=tfrecord",
            f"data.source.path={root}",
            "trainer.global_batch_size=30",
            "trainer.steps_per_epoch=null",
        ]
    )
    code, err = _stopped(cfg, capsys)
    assert code == 2
    assert len(err) == 1, err
    assert err[0].startswith(f"kdist: data error: {victim}")
    assert "is corrupt or truncated" in err[0]


@pytest.mark.slow
def test_metrics_json_counts_the_runs_epochs_not_this_sessions(tmp_path: Path):
    kdist.Experiment(compose([*FAST, "trainer.epochs=1"]), run_dir=tmp_path).fit()
    assert json.loads((tmp_path / "metrics.json").read_text())["epochs"] == 1
    kdist.Experiment(compose([*FAST, "trainer.epochs=3"]), run_dir=tmp_path).fit()
    summary = json.loads((tmp_path / "metrics.json").read_text())
    assert summary["epochs"] == 3 and summary["steps"] == 15
    assert np.isfinite(summary["train"]["loss"])
