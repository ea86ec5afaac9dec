"""The run-directory format is defined once (kdist.runs.layout); conf/train.yaml agrees with it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import yaml
from helpers import REPO

from kdist.runs import layout
from kdist.runs.layout import HYDRA_RUN_DIR, HYDRA_SWEEP_DIR, default_run_dir

WHEN = datetime(2026, 11, 21, 10, 0, 5, 123456)


def test_train_yaml_uses_the_run_dir_formats():
    hydra = yaml.safe_load((REPO / "kdist" / "conf" / "train.yaml").read_text())["hydra"]
    assert hydra["run"]["dir"] == HYDRA_RUN_DIR
    assert hydra["sweep"]["dir"] == HYDRA_SWEEP_DIR
    assert HYDRA_RUN_DIR == "outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}"
    assert HYDRA_SWEEP_DIR == "multirun/${now:%Y-%m-%d}/${now:%H-%M-%S}"


def test_default_run_dir_is_outputs_date_time():
    assert default_run_dir(now=WHEN) == Path("outputs/2026-11-21/10-00-05")


def test_default_run_dir_with_microseconds_tells_runs_of_one_second_apart():
    assert default_run_dir(microseconds=True, now=WHEN) == Path(
        "outputs/2026-11-21/10-00-05-123456"
    )
    later = WHEN.replace(microsecond=123457)
    assert default_run_dir(microseconds=True, now=later) != default_run_dir(
        microseconds=True, now=WHEN
    )


def test_default_run_dir_is_now_when_not_given():
    before = datetime.now().replace(microsecond=0)
    folder = default_run_dir()
    after = datetime.now()
    stamp = datetime.strptime(f"{folder.parent.name} {folder.name}", "%Y-%m-%d %H-%M-%S")
    assert folder.parts[0] == "outputs"
    assert before <= stamp <= after


def test_one_clean_up_removes_what_interrupted_saves_left_and_nothing_else(tmp_path: Path):
    backup = tmp_path / layout.BACKUP
    (backup / "ckpt-20_temp").mkdir(parents=True)
    (backup / "ckpt-20_temp" / "part").write_text("x")
    (backup / "ckpt-10.index").write_text("kept")
    (backup / "checkpoint_temp_1234").write_text("x")
    outside = tmp_path / "elsewhere_temp"
    outside.mkdir()
    (backup / "link_temp").symlink_to(outside)
    removed = layout.clean_leftovers(backup)
    assert sorted(p.name for p in removed) == ["checkpoint_temp_1234", "ckpt-20_temp", "link_temp"]
    assert sorted(p.name for p in backup.iterdir()) == ["ckpt-10.index"]
    assert outside.is_dir()  # a link is removed, never followed
    assert layout.clean_leftovers(tmp_path / layout.CHECKPOINTS) == []  # no folder: nothing


def test_the_run_folder_names_are_spelled_once():
    assert layout.SAVE_FOLDERS == ("backup", "checkpoints")
    assert {layout.METRICS, layout.MODEL, layout.HISTORY, layout.HYDRA} <= layout.RUN_FILES
    assert layout.saved_configs("r") == (Path("r/.hydra/config.yaml"), Path("r/config.yaml"))
