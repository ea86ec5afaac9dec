"""The run-directory format is defined once (kdist.runs.layout); conf/train.yaml agrees with it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import yaml
from helpers import REPO

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
