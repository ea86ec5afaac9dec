"""A run's TensorBoard HParams session (`kdist.callbacks.run_hparams`). Cost: ~3 s."""

from __future__ import annotations

from pathlib import Path

import pytest
from hparams_events import sessions
from omegaconf import OmegaConf

from kdist.callbacks.run_hparams import RunHParams, overridden_values, session_name
from kdist.runs.sweep import train_job


def test_overridden_values_take_the_configs_typed_value():
    cfg = OmegaConf.create(
        {
            "optimizer": {"learning_rate": 0.001, "name": "adam"},
            "model": {"units": 64},
            "trainer": {"epochs": 3, "metrics": ["mae"], "validation": False, "loss": None},
        }
    )
    overrides = [
        "optimizer.learning_rate=1e-3",
        "model=mlp",
        "trainer.epochs=3",
        "trainer.metrics=[mae]",
        "+trainer.validation=false",
        "trainer.loss=null",
        "~callbacks.csv",
        "hydra.verbose=true",
    ]
    assert overridden_values(overrides, cfg) == {
        "optimizer.learning_rate": 0.001,
        "model": "mlp",
        "trainer.epochs": 3,
        "trainer.metrics": "[mae]",
        "trainer.validation": False,
        "trainer.loss": "null",
    }


def test_outside_a_hydra_app_there_is_no_train_job():
    assert train_job() is None


def test_the_session_holds_the_values_and_the_final_metrics(tmp_path: Path):
    folder = tmp_path / "3" / "tensorboard"
    hparams = {"optimizer.learning_rate": 0.003, "model": "cnn"}
    callback = RunHParams(log_dir=folder, hparams=hparams, objective="val_mae")
    callback.on_train_begin()
    callback.on_epoch_end(0, {"loss": 1.0, "val_mae": 0.5})
    callback.on_epoch_end(1, {"loss": 0.75})  # no validation this epoch
    callback.on_train_end({"loss": 0.75, "note": "not a number"})
    (session,) = sessions(folder)
    # The run's folder, not its last part (a job number repeats between sweeps).
    assert session["group"] == (tmp_path / "3").resolve().as_posix()
    # The objective is declared first, then the other metrics.
    assert session["declared"] == ["val_mae", "loss"]
    assert session["hparams"] == {"optimizer.learning_rate": 0.003, "model": "cnn"}
    assert session["scalars"] == {"loss": 0.75, "val_mae": 0.5}


def test_a_failed_write_is_a_warning(tmp_path: Path, caplog):
    (tmp_path / "taken").write_text("a file where the folder goes")
    callback = RunHParams(log_dir=tmp_path / "taken" / "tensorboard", hparams={"a": 1})
    callback.on_train_end({"loss": 1.0})
    assert "no TensorBoard HParams written" in caplog.text


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_config_values_are_text(value):
    cfg = OmegaConf.create({"trainer": {"clip": value}})
    assert overridden_values([f"trainer.clip={value}"], cfg) == {"trainer.clip": str(value)}


def test_a_session_is_named_by_its_folder_relative_to_the_root(tmp_path: Path):
    assert session_name(tmp_path / "multirun" / "a" / "0", root=tmp_path) == "multirun/a/0"
    assert session_name(tmp_path / "0", root=tmp_path / "elsewhere") == str(
        (tmp_path / "0").resolve()
    )
