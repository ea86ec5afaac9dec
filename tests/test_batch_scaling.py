"""`trainer.per_replica_batch_size` grows the global batch with the replicas; lr_scaling warns
when the batch stays fixed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import compose

import kdist
from kdist.config import ConfigError
from kdist.train import precheck

PER_REPLICA = ["trainer.global_batch_size=null", "trainer.per_replica_batch_size=16"]


def test_per_replica_batch_gives_the_global_batch_on_mirrored(tmp_path: Path):
    exp = kdist.Experiment(compose(["strategy=mirrored", *PER_REPLICA, f"run_dir={tmp_path}"]))
    assert exp.num_replicas == 2
    assert exp.cfg.trainer.global_batch_size == 32
    assert exp.steps_per_epoch == exp.source.size("train") // 32


def test_per_replica_batch_on_one_device(tmp_path: Path):
    exp = kdist.Experiment(compose(["strategy=one_device", *PER_REPLICA, f"run_dir={tmp_path}"]))
    assert exp.cfg.trainer.global_batch_size == 16
    assert exp.steps_per_epoch == exp.source.size("train") // 16


def test_both_batch_sizes_are_refused(tmp_path: Path):
    cfg = compose(["trainer.per_replica_batch_size=16", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError) as raised:
        kdist.Experiment(cfg)
    message = str(raised.value)
    assert message.startswith(
        "trainer.per_replica_batch_size=16: is set together with trainer.global_batch_size=64"
    )
    assert "add trainer.global_batch_size=null" in message


def test_both_batch_sizes_exit_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as raised:
        precheck(["trainer.per_replica_batch_size=16"])
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "trainer.per_replica_batch_size" in err


def test_no_batch_size_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"is null and so is trainer\.per_replica_batch_size"):
        kdist.Experiment(compose(["trainer.global_batch_size=null", f"run_dir={tmp_path}"]))


def test_lr_scaling_with_a_fixed_global_batch_warns(tmp_path: Path, caplog):
    cfg = compose(["strategy=mirrored", "optimizer.lr_scaling=linear", f"run_dir={tmp_path}"])
    with caplog.at_level(logging.WARNING, logger="kdist"):
        kdist.Experiment(cfg)
    warnings = [r.message for r in caplog.records if "optimizer.lr_scaling" in r.message]
    assert len(warnings) == 1
    assert "trainer.global_batch_size=64 stays fixed" in warnings[0]


def test_lr_scaling_with_a_per_replica_batch_does_not_warn(tmp_path: Path, caplog):
    overrides = ["strategy=mirrored", "optimizer.lr_scaling=linear", *PER_REPLICA]
    with caplog.at_level(logging.WARNING, logger="kdist"):
        kdist.Experiment(compose([*overrides, f"run_dir={tmp_path}"]))
    assert not [r for r in caplog.records if "optimizer.lr_scaling" in r.message]
