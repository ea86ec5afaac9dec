"""Every config option and recipe composes and builds (the lightning-hydra-template check)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REPO, compose

import kdist
from kdist import callbacks as kdist_callbacks

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


CASES = [(g, o) for g in GROUPS for o in _options(g) if (g, o) != ("model", "custom")]


@pytest.mark.parametrize(("group", "option"), CASES, ids=[f"{g}={o}" for g, o in CASES])
def test_option_composes_and_builds(group: str, option: str, tmp_path: Path):
    overrides = [f"{group}={option}", f"run_dir={tmp_path}"]
    if group == "data" and option == "synthetic":
        overrides += ["data.source.input_shape=[8,8,1]", "data.source.num_train=256"]
    cfg = compose(overrides)
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


RECIPES = sorted(p.stem for p in (REPO / "recipes").glob("*.yaml"))


def test_there_are_recipes():
    assert {"mnist_cnn_one_device", "mnist_cnn_mirrored"} <= set(RECIPES)


@pytest.mark.parametrize("name", RECIPES)
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
