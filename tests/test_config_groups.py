"""The one list of config groups matches conf/, schemas and docs; shared modules stay TF-free."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from helpers import REPO

from kdist.config import schema
from kdist.config.groups import GROUP_INTROS, GROUPS, TRAIN_GROUPS

CONF = REPO / "kdist" / "conf"


def test_train_yaml_defaults_are_the_train_groups_in_order():
    defaults = yaml.safe_load((CONF / "train.yaml").read_text())["defaults"]
    groups = [next(iter(entry)) for entry in defaults if isinstance(entry, dict)]
    assert tuple(groups) == TRAIN_GROUPS


def test_every_conf_folder_is_a_group_and_every_group_has_a_folder():
    folders = {p.name for p in CONF.iterdir() if p.is_dir() and any(p.glob("*.yaml"))}
    assert folders == set(GROUPS)
    assert set(TRAIN_GROUPS) < set(GROUPS)


def test_every_group_has_schemas_and_an_intro():
    assert tuple(schema._GROUP_SCHEMAS) == GROUPS
    assert set(schema._OPTION_SCHEMAS) == set(GROUPS)
    assert all(schema._GROUP_SCHEMAS[group] for group in GROUPS)
    assert list(GROUP_INTROS) == list(GROUPS)
    assert all(len(intro) > 20 for intro in GROUP_INTROS.values())


@pytest.mark.parametrize(
    "module",
    ["kdist.config.groups", "kdist.config.constants", "kdist.runs.layout", "kdist.runs.fileio"],
)
def test_modules_that_models_and_data_read_import_no_tensorflow(module):
    code = f"import sys, {module}; print('tensorflow' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False"
