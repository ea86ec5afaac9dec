"""The objective has one home, `kdist.config.objective`, below everything that uses it.

`validate` only checks (an `auto` objective stays `auto`); `resolve_objective` is the step
that turns `auto` into a name and a direction; `monitor_mode` gives a monitor's mode from
the same directions. The module, the config checks and `validate` import no TensorFlow.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import compose

from kdist.config import ConfigError
from kdist.config.objective import direction_of, monitor_mode, resolve_objective
from kdist.config.validate import validate


def test_validate_only_validates_and_resolve_objective_fills_auto():
    cfg = compose([])
    assert (cfg.objective.name, cfg.objective.direction) == ("auto", "auto")
    validate(cfg)
    assert (cfg.objective.name, cfg.objective.direction) == ("auto", "auto")
    resolve_objective(cfg)
    assert (cfg.objective.name, cfg.objective.direction) == ("val_accuracy", "max")


def test_resolve_objective_follows_the_loss_and_validation():
    cfg = compose(["trainer.loss=mse", "trainer.metrics=[mae]", "trainer.validation=false"])
    resolve_objective(cfg)
    assert (cfg.objective.name, cfg.objective.direction) == ("loss", "min")


def test_validate_still_refuses_a_bad_direction():
    with pytest.raises(ConfigError, match=r"^objective.direction='up'"):
        validate(compose(["objective.direction=up"]))


def test_directions_and_monitor_modes_come_from_one_place():
    assert direction_of("val_mean_absolute_error") == "min"
    assert direction_of("val_auc") == "max"
    assert monitor_mode("val_loss", "max", {}) == "max"  # as configured
    assert monitor_mode("val_score", "auto", {"score": "min"}) == "min"  # the metric's own
    assert monitor_mode("val_accuracy", "auto", {}) == "max"  # by its name


def test_the_objective_and_the_config_checks_import_no_tensorflow():
    code = (
        "import sys, kdist.config.objective, kdist.config.compile_rules, kdist.config.validate; "
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"
