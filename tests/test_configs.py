"""Every config option and recipe composes and builds (the lightning-hydra-template check)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REPO, compose, option_overrides

import kdist
from kdist import callbacks as kdist_callbacks
from kdist.config.validate import validate

CONF = REPO / "kdist" / "conf"
GROUPS = ("strategy", "model", "data", "optimizer", "trainer", "runtime", "callbacks")


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_conf_symlink_points_at_the_package_configs():
    assert (REPO / "conf").resolve() == CONF.resolve()
    assert (REPO / "conf" / "train.yaml").is_file()


def test_every_design_option_exists():
    expected = {
        "strategy": {"auto", "one_device", "mirrored"},
        "model": {"mlp", "cnn"},
        "data": {"digits", "synthetic"},
        "optimizer": {"adam", "sgd", "adamw"},
        "trainer": {"default", "fast_dev"},
        "runtime": {"default"},
        "callbacks": {"default", "minimal"},
    }
    for group, options in expected.items():
        assert options <= set(_options(group)), group


# Options whose strategy needs several processes: multi_worker_mirrored would enable
# collective ops in this test process, parameter_server needs a running cluster.
NEEDS_A_CLUSTER = {("strategy", "multi_worker_mirrored"), ("strategy", "parameter_server")}
CASES = [(g, o) for g in GROUPS for o in _options(g) if (g, o) != ("model", "custom")]


@pytest.mark.parametrize(("group", "option"), CASES, ids=[f"{g}={o}" for g, o in CASES])
def test_option_composes_and_builds(group: str, option: str, tmp_path: Path):
    overrides = [f"{group}={option}", f"run_dir={tmp_path}"]
    overrides += option_overrides(group, option, tmp_path)
    if group == "data" and option == "synthetic":
        overrides += ["data.source.input_shape=[8,8,1]", "data.source.num_train=256"]
    cfg = compose(overrides)
    if (group, option) in NEEDS_A_CLUSTER:
        # Composes and validates here; built and trained end to end by its own tests
        # (tests/test_launch.py, tests/test_parameter_server.py) in separate processes.
        validate(cfg)
        return
    exp = kdist.Experiment(cfg)
    model = exp.build_model()
    assert model.count_params() > 0
    assert exp.steps_per_epoch >= 1
    with exp.strategy.scope():
        built = kdist_callbacks.build(cfg.callbacks, output_dir=tmp_path)
    assert all(hasattr(cb, "on_epoch_end") for cb in built)


def test_custom_model_target(tmp_path: Path):
    cfg = compose(
        [
            "model=custom",
            "model._target_=helpers.tiny_model",
            "+model.width=8",
            f"run_dir={tmp_path}",
        ]
    )
    model = kdist.Experiment(cfg).build_model()
    assert model.layers[-2].units == 8


# Recipes whose strategy needs several processes, and the test that runs each one.
CLUSTER_RECIPES = {"ps_embedding": "tests/test_parameter_server.py"}
RECIPES = sorted(p.stem for p in (REPO / "recipes").glob("*.yaml"))


def test_there_are_recipes():
    assert {"mnist_cnn_one_device", "mnist_cnn_mirrored"} <= set(RECIPES)


@pytest.mark.parametrize("name", sorted(CLUSTER_RECIPES))
def test_cluster_recipe_composes(name: str, tmp_path: Path):
    # Trained end to end in the test file CLUSTER_RECIPES names, with a local cluster.
    cfg = compose([f"run_dir={tmp_path}"], config_name=name, config_dir=REPO / "recipes")
    validate(cfg)
    assert (REPO / CLUSTER_RECIPES[name]).read_text().count(name) >= 1


@pytest.mark.parametrize("name", [r for r in RECIPES if r not in CLUSTER_RECIPES])
def test_recipe_composes_and_smoke_runs(name: str, tmp_path: Path):
    cfg = compose(
        [
            f"run_dir={tmp_path}",
            "trainer.epochs=1",
            "trainer.steps_per_epoch=2",
            "trainer.verbose=0",
        ],
        config_name=name,
        config_dir=REPO / "recipes",
    )
    exp = kdist.Experiment(cfg)
    exp.fit()
    assert int(exp.optimizer.iterations.numpy()) == 2
    assert (tmp_path / "metrics.json").is_file()
