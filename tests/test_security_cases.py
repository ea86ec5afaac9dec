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
from kdist.callbacks import guards
from kdist.engine.checkpoint import writer as writer_module
from kdist.train import run

FAST = ["trainer=fast_dev", "trainer.verbose=0", "callbacks.curves=false"]


@pytest.fixture(autouse=True)
def _no_ctrl_c_saving(monkeypatch):
    # `run` turns Ctrl-C saving on for the process; keep it off for the other tests.
    monkeypatch.setattr(guards, "_SAVE_ON_CTRL_C", False)


def _stopped(cfg, capsys) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as stopped:
        run(cfg)
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line]
    return int(stopped.value.code), err


def _indexes(folder: Path) -> list[int]:
    return sorted(int(p.name[5:-6]) for p in folder.glob("ckpt-*.index"))


def test_an_infinite_learning_rate_says_no_backup_was_saved(tmp_path: Path, capsys):
    # `inf` itself is refused before training (status 2, issue 38); a finite rate that
    # overflows at once reaches the guard.
    cfg = compose([*FAST, f"run_dir={tmp_path}", "optimizer.learning_rate=1e38"])
    code, err = _stopped(cfg, capsys)
    assert code == 3
    assert len(err) == 1, err
    assert err[0].startswith("kdist: error: training loss is nan after step ")
    assert err[0].endswith(
        "stopped without saving this state (no backup was saved before it: a re-run starts afresh)"
    )
    assert _indexes(tmp_path / "backup") == []


def test_a_full_disk_is_one_line_status_6_and_no_temp_folder(tmp_path: Path, capsys, monkeypatch):
    write = writer_module.HostWriter.write
    calls = []

    def full(self, prefix: str) -> None:
        calls.append(prefix)
        if len(calls) > 1:  # the first backup is written; the disk is full after it
            Path(f"{prefix}_temp").mkdir(exist_ok=True)  # what a cut save leaves
            raise OSError(errno.ENOSPC, "No space left on device", prefix)
        write(self, prefix)

    monkeypatch.setattr(writer_module.HostWriter, "write", full)
    cfg = compose([*FAST, f"run_dir={tmp_path}", "callbacks.backup.every_n_steps=2"])
    code, err = _stopped(cfg, capsys)
    assert code == 6
    assert len(err) == 1, err
    # Issue 52: the full disk is named as one, with its folder.
    assert err[0].startswith(f"kdist: write error: the disk holding {tmp_path}/backup is full")
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
    from kdist.data.tfrecords import write_tfrecords

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


def test_a_csv_with_a_header_only_says_it_has_no_rows(tmp_path: Path):
    from kdist.config import ConfigError

    path = tmp_path / "empty.csv"
    path.write_text("a,b,label\n")
    with pytest.raises(ConfigError) as raised:
        kdist.data.csv(path=str(path), label_column="label")
    assert str(raised.value).startswith("data.source.path=")
    assert f"has a header but no data rows ({path})" in str(raised.value)


def _run_with_model(tmp_path: Path) -> Path:
    """A run folder with the default config and an (untrained) model.keras."""
    from omegaconf import OmegaConf

    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(compose([])))
    model = kdist.models.build("mlp", input_shape=(64,), num_classes=10)
    model.save(run_dir / "model.keras")
    return run_dir


def test_predict_refuses_a_wrong_shape_and_a_garbage_model_in_one_line(tmp_path: Path, capsys):
    from kdist import predict

    run_dir = _run_with_model(tmp_path)
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, x=np.zeros((5, 7), np.float32))
    with pytest.raises(SystemExit) as stopped:
        predict.main([f"run_dir={run_dir}", f"input={wrong}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(err) == 1, err
    assert err[0] == (
        f"kdist: config error: input='{wrong}': has features of shape (7,) per example; "
        "the model takes (64,)"
    )
    (run_dir / "model.keras").write_bytes(b"PK\x03\x04 not really a zip archive")
    with pytest.raises(SystemExit) as stopped:
        predict.main([f"run_dir={run_dir}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"kdist: config error: {run_dir / 'model.keras'}")
    assert "is not a readable Keras model" in err[0]
    assert not (run_dir / "predictions.npz").exists()


def test_the_sidecar_says_there_is_no_checkpoint_and_gives_up(tmp_path: Path, capsys, monkeypatch):
    from kdist import evaluate
    from kdist.evaluation import sidecar

    run_dir = _run_with_model(tmp_path)
    monkeypatch.setattr(sidecar, "IDLE_SECONDS", 0.3)
    with pytest.raises(SystemExit) as stopped:
        evaluate.main([f"run_dir={run_dir}", "watch=true", "poll_seconds=0.1"])
    captured = capsys.readouterr()
    assert stopped.value.code == 2
    assert captured.out.count("[sidecar] no checkpoint in ") == 1  # said once
    err = captured.err.strip().splitlines()
    assert err == [
        f"kdist: config error: run_dir='{run_dir}': has no checkpoint to evaluate and no run "
        "training in it (waited 0 s); start the training run, or watch another run_dir"
    ]
    (run_dir / "metrics.json").write_text('{"steps": 10}\n')  # finished, no checkpoints
    with pytest.raises(SystemExit) as stopped:
        evaluate.main([f"run_dir={run_dir}", "watch=true", "poll_seconds=0.1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(err) == 1
    assert "holds a finished run without checkpoints" in err[0]


def test_a_batch_that_would_not_fit_in_memory_exits_2_before_any_work(tmp_path: Path, capsys):
    cfg = compose(
        [
            *FAST,
            f"run_dir={tmp_path}",
            "trainer.global_batch_size=1000000000",
            "trainer.steps_per_epoch=2",
        ]
    )
    code, err = _stopped(cfg, capsys)
    assert code == 2
    assert len(err) == 1, err
    assert err[0].startswith("kdist: config error: trainer.global_batch_size=1000000000: ")
    assert "bytes an example" in err[0] and "memory available" in err[0]
    assert not (tmp_path / "backup").exists() and not (tmp_path / "metrics.json").exists()


def test_the_memory_bound_is_the_batch_bytes_against_half_the_memory(monkeypatch):
    from kdist.config import ConfigError
    from kdist.data import checks

    source = kdist.data.digits()  # 8x8x1 float32 features and an int32 label: 260 bytes
    assert checks.element_bytes(source.dataset("train").element_spec) == 64 * 4 + 4
    monkeypatch.setattr(checks, "available_memory", lambda: 260 * 1000 * 2)
    checks.check_batch_memory(source, 1000)  # exactly two batches fit
    with pytest.raises(ConfigError, match=r"at most 1000 here"):
        checks.check_batch_memory(source, 1001)
