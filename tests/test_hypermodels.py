"""keras-tuner hypermodels (`def build_model(hp)`, `keras_tuner.HyperModel`) as kdist models.

Fast cases build the hypermodels of `tests/hypermodels.py` without training, and run two
tiny in-process searches (about 10 s each); the `slow` ones run `python -m kdist.tune`
under mirrored (2 logical CPUs), rerun the best trial from `best.yaml` with
`python -m kdist.train`, and check the command line's one-line errors.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import hypermodels
import keras
import keras_tuner
import pytest
import yaml
from helpers import LOGICAL, compose, run_module

import kdist
from kdist.config import ConfigError
from kdist.models import from_config
from kdist.models import hypermodel as hm
from kdist.runs.fileio import read_csv
from kdist.tune import _default_space
from kdist.tuning import run as run_search
from kdist.tuning.space import Space

TESTS = Path(__file__).resolve().parent
TINY = ["trainer=fast_dev", "trainer.verbose=0", "callbacks=minimal", "tuner.verbose=0"]
SHAPES = {"input_shape": (8, 8, 1), "num_classes": 10}


def _node(target: str, **keys):
    return {"_target_": f"hypermodels.{target}", **keys}


def _dense_units(model: keras.Model) -> list[int]:
    return [layer.units for layer in model.layers if isinstance(layer, keras.layers.Dense)]


# --- what a hypermodel is -------------------------------------------------------------------


def test_detection():
    assert hm.is_hypermodel(hypermodels.build_model)
    assert hm.is_hypermodel(hypermodels.build_uncompiled)  # hp first, then the data's shapes
    assert hm.is_hypermodel(hypermodels.DigitsHyperModel)
    assert hm.is_hypermodel(hypermodels.digits_hypermodel)
    assert hm.is_hypermodel(lambda hp: None)
    assert not hm.is_hypermodel(kdist.models.mlp)
    assert not hm.is_hypermodel(lambda units, hp: None)  # `hp` must come first
    assert not hm.is_hypermodel(None)


# --- building with values: kdist.train ------------------------------------------------------


def test_build_takes_keras_tuner_defaults_and_model_hp_values():
    model = from_config(_node("build_model"), **SHAPES)
    # keras-tuner's defaults: an Int's min_value, a Choice's first value.
    assert _dense_units(model) == [8, 10]
    assert model.layers[1].activation.__name__ == "relu"
    assert model.compiled and isinstance(model.optimizer, keras.optimizers.Adam)

    model = from_config(_node("build_model", hp={"units": 24, "activation": "tanh"}), **SHAPES)
    assert _dense_units(model) == [24, 10]
    assert model.layers[1].activation.__name__ == "tanh"

    # The data's shapes go to a hypermodel that takes them, as to any model._target_.
    model = from_config(
        _node("build_uncompiled", hp={"units": 4}), input_shape=(4, 4), num_classes=3
    )
    assert _dense_units(model) == [4, 3] and not model.compiled


def test_build_hypermodel_class_and_instance():
    model = from_config(_node("DigitsHyperModel", width=5, hp={"factor": 3}), **SHAPES)
    assert _dense_units(model) == [15, 10]
    assert math.isclose(float(model.optimizer.learning_rate.numpy()), 1e-3, rel_tol=1e-6)
    model = from_config(_node("digits_hypermodel", hp={"factor": 2}), **SHAPES)
    assert _dense_units(model) == [8, 10]


@pytest.mark.parametrize(
    "target, extra",
    [
        ("build_model", []),
        ("DigitsHyperModel", ["+model.width=3"]),  # a class: its constructor's keys
        ("digits_hypermodel", []),  # an instance: not callable, still a model._target_
    ],
)
def test_the_config_checks_take_model_hp(target, extra):
    from kdist.config.validate import validate

    cfg = compose(
        ["model=custom", f"model._target_=hypermodels.{target}", "++model.hp.x=1", *extra]
    )
    validate(cfg)  # model.hp is checked against what the hypermodel declares when built


def test_train_runs_a_hypermodel_with_a_hydra_override(tiny):
    cfg = compose(
        ["model=custom", "model._target_=hypermodels.build_model", "++model.hp.units=16", *tiny]
    )
    exp = kdist.Experiment(cfg)
    model = exp.build_model()
    assert _dense_units(model) == [16, 10]
    # build_model's own compile is kept: its learning rate, not optimizer.learning_rate.
    assert math.isclose(float(model.optimizer.learning_rate.numpy()), 1e-2, rel_tol=1e-6)


@pytest.mark.parametrize(
    "node, key, words",
    [
        (_node("build_model", hp={"nope": 1}), "model.hp.nope", "declares: units, activation"),
        (_node("build_model", hp={"units": 7}), "model.hp.units", "outside"),
        (_node("build_model", hp={"activation": "gelu"}), "model.hp.activation", "outside"),
        (_node("build_failing", hp={"units": 16}), "model.hp", "raised ValueError: 16 units"),
        (_node("build_not_a_model"), "model._target_", "returned str, not a keras.Model"),
        (_node("digits_hypermodel", width=3), "model.width", "HyperModel instance"),
        (_node("build_model", width=3), "model.width", "unknown key for hypermodels.build_model"),
        (_node("build_uncompiled", num_classes=3), "model.num_classes", "set by kdist"),
        ({"_target_": "kdist.models.mlp", "hp": {"units": 3}}, "model.hp", "not a keras-tuner"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(node, key, words):
    with pytest.raises(ConfigError) as info:
        from_config(node, **SHAPES)
    assert info.value.key == key
    assert words in str(info.value)
    assert "\n" not in str(info.value)


# --- the search space ----------------------------------------------------------------------


def test_search_space_finds_conditional_hyperparameters():
    found = hm.search_space(_node("build_conditional"))
    names = [p.name for p in found.hyperparameters.space]
    assert names == ["kind", "width"]  # `width` only exists for kind=dense
    width = found.hyperparameters.space[1]
    assert width.conditions and width.conditions[0].name == "kind"
    assert found.compiled and found.target == "hypermodels.build_conditional"

    # A value given in model.hp is fixed: the search does not tune it.
    fixed = hm.search_space(_node("build_model", hp={"units": 16}))
    kinds = {p.name: type(p).__name__ for p in fixed.hyperparameters.space}
    assert kinds["units"] == "Fixed" and kinds["activation"] == "Choice"

    with pytest.raises(ConfigError, match="block/units"):
        hm.search_space(_node("build_bad_name"))


def test_space_combines_config_keys_and_hyperparameters():
    config = Space.from_config({"trainer": {"global_batch_size": "choice(16, 32)"}})
    found = hm.search_space(_node("build_conditional"))
    space = config.with_hypermodel(found.hyperparameters)
    assert space.keys == ["trainer.global_batch_size", "model.hp.kind", "model.hp.width"]
    assert space.names == ["trainer.global_batch_size", "kind", "width"]
    hps = space.hyperparameters()
    assert [p.name for p in hps.space] == ["trainer.global_batch_size", "kind", "width"]
    assert hps.space[2].conditions  # the condition survives the merge
    values = {"trainer.global_batch_size": 32, "kind": "linear"}  # width inactive
    assert space.overrides(values) == ["trainer.global_batch_size=32", "++model.hp.kind=linear"]
    assert space.hp_values({**values, "kind": "dense", "width": 8}) == {"kind": "dense", "width": 8}
    assert space.owns("model.hp") and space.owns("model.hp.width")

    twice = Space.from_config({"model": {"hp": {"kind": "choice(dense, linear)"}}})
    with pytest.raises(ConfigError, match="declares itself") as info:
        twice.with_hypermodel(found.hyperparameters)
    assert info.value.key == "tuner.space.model.hp.kind"


def test_default_space_is_dropped_only_when_none_is_chosen():
    assert _default_space(["model=custom", "model._target_=m.build_model"])
    assert not _default_space(["model=custom", "tuner/space=cnn"])
    assert not _default_space(["-cd", "recipes", "-cn", "tune_x", "model=custom"])


# --- searches ------------------------------------------------------------------------------


def _search(tmp_path: Path, overrides):
    every = [*TINY, "model=custom", "~tuner/space", *overrides]
    cfg = compose(every, config_name="tune")
    return run_search(cfg, run_dir=tmp_path / "search", overrides=[LOGICAL, *every])


@pytest.mark.slow  # 15-80 s on 2 cores: make test-all runs it
def test_search_combines_hp_and_config_keys_and_best_yaml_reproduces(tmp_path):
    result = _search(
        tmp_path,
        [
            "model._target_=hypermodels.build_model",
            "tuner.max_trials=2",
            "trainer.epochs=1",
            "+tuner.space.trainer.global_batch_size='choice(16,32)'",
        ],
    )
    assert [row["status"] for row in result.trials] == ["COMPLETED", "COMPLETED"]
    rows = read_csv(tmp_path / "search" / "trials.csv")
    assert {"model.hp.units", "model.hp.activation", "trainer.global_batch_size"} <= set(rows[0])
    best = yaml.safe_load((tmp_path / "search" / "best.yaml").read_text())
    assert set(best["hp"]) == {"units", "activation"}
    assert f"++model.hp.units={best['hp']['units']}" in best["overrides"]
    assert "++model.hp.units=" in best["command"]

    # Rerun the best trial from best.yaml's overrides (what `python -m kdist.train` runs).
    cfg = compose([*best["overrides"], f"run_dir={tmp_path / 'again'}"])
    exp = kdist.Experiment(cfg)
    assert _dense_units(exp.build_model())[0] == best["hp"]["units"]
    exp.fit()
    assert abs(exp.objective() - best["objective"]["value"]) < 0.01


def test_a_trial_whose_build_model_raises_fails_and_the_search_goes_on(tmp_path):
    result = _search(
        tmp_path,
        ["model._target_=hypermodels.build_failing", "tuner.max_trials=2", "trainer.epochs=1"],
    )
    by_units = {row["model.hp.units"]: row for row in result.trials}
    assert by_units[8]["status"] == "COMPLETED"
    failed = by_units[16]
    assert failed["status"] == "FAILED"
    assert failed["reason"].startswith("model.hp={'units': 16, ")
    assert "hypermodels.build_failing(hp) raised" in failed["reason"]
    assert "raised ValueError: 16 units are not supported here" in failed["reason"]
    assert "\n" not in failed["reason"]
    # The trial's folder keeps build_model's traceback.
    error = (tmp_path / "search" / failed["run_dir"] / "error.txt").read_text()
    assert "in build_failing" in error
    assert result.best is not None and result.best["hp"] == {"units": 8, "activation": "relu"}


def test_objective_auto_follows_what_the_hypermodel_compiles(tmp_path):
    found = hm.search_space(_node("build_without_accuracy"))
    assert found.metrics == ("top3",)
    assert hm.search_space(_node("build_model")).metrics == ("accuracy",)
    result = _search(
        tmp_path,
        [
            "model._target_=hypermodels.build_without_accuracy",
            "tuner.max_trials=1",
            "trainer.epochs=1",
        ],
    )
    row = result.trials[0]
    assert row["status"] == "COMPLETED" and row["objective_name"] == "val_loss"
    assert result.best["objective"]["direction"] == "min"
    assert "objective.name=val_loss" in result.best["overrides"]


def test_search_refuses_config_compile_keys_for_a_compiled_hypermodel(tmp_path):
    with pytest.raises(ConfigError, match="compiles the model itself") as info:
        _search(
            tmp_path,
            [
                "model._target_=hypermodels.build_model",
                "+tuner.space.optimizer.learning_rate='interval(1e-3,1e-2)'",
            ],
        )
    assert info.value.key == "tuner.space.optimizer.learning_rate"


# --- the command line ---------------------------------------------------------------------


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path}


@pytest.mark.slow
def test_command_line_bad_hypermodel_is_one_line_exit_2(tmp_path):
    proc = run_module(
        "kdist.tune",
        [
            "model=custom",
            "model._target_=hypermodels.build_not_a_model",
            f"hydra.run.dir={tmp_path / 'search'}",
            *TINY,
        ],
        cwd=tmp_path,
        env=_env(),
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert "model._target_=" in line and "returned str, not a keras.Model" in line


@pytest.mark.slow
def test_command_line_search_under_mirrored_and_rerun_of_the_best(tmp_path):
    """Done-when of issue 28: 4 trials of build_model(hp) (an hp.Int, an hp.Choice,
    compiled inside) under mirrored; best.yaml's command reproduces the objective."""
    search = tmp_path / "search"
    proc = run_module(
        "kdist.tune",
        [
            "model=custom",
            "model._target_=hypermodels.build_model",
            "strategy=mirrored",
            LOGICAL,
            "trainer.epochs=2",
            "trainer.steps_per_epoch=10",
            "trainer.verbose=0",
            "callbacks=minimal",
            "tuner.max_trials=4",
            "tuner.verbose=0",
            f"hydra.run.dir={search}",
        ],
        cwd=tmp_path,
        env=_env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_csv(search / "trials.csv")
    assert len(rows) == 4 and all(row["status"] == "COMPLETED" for row in rows)
    assert (search / ".hydra" / "config.yaml").is_file()  # written once the search is accepted
    pairs = {(row["model.hp.units"], row["model.hp.activation"]) for row in rows}
    assert len(pairs) == 4  # four different points of the hp space
    best = yaml.safe_load((search / "best.yaml").read_text())
    assert "strategy=mirrored" in best["overrides"]
    trial_cfg = yaml.safe_load(
        (search / "trials" / f"trial_{best['trial_id']}" / "config.yaml").read_text()
    )
    assert trial_cfg["model"]["hp"] == best["hp"]

    # The user's rerun: best.yaml's command, in a fresh process.
    again = tmp_path / "again"
    args = [*best["overrides"], f"hydra.run.dir={again}"]
    proc = run_module("kdist.train", args, cwd=tmp_path, env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((again / "metrics.json").read_text())
    assert metrics["objective"]["name"] == best["objective"]["name"] == "val_accuracy"
    assert metrics["num_replicas"] == 2
    assert abs(metrics["objective"]["value"] - best["objective"]["value"]) < 0.01


# --- from a notebook: kdist.tune.search ------------------------------------------------------


def _digits():
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32").reshape(-1, 8, 8, 1)
    return (x[:1400], y[:1400]), (x[1400:], y[1400:])


def test_notebook_search_with_arrays_returns_best_hp_and_model(tmp_path):
    import kdist.tune

    (x, y), (xv, yv) = _digits()

    def build_model(hp):  # a closure: no importable name, as often in a notebook
        return hypermodels.build_model(hp)

    tuner = kdist.tune.search(
        build_model,
        x,
        y,
        validation_data=(xv, yv),
        objective="val_accuracy",
        max_trials=2,
        epochs=1,
        batch_size=32,
        directory=tmp_path / "search",
        overrides=["callbacks=minimal", "callbacks.save_model=true", "trainer.steps_per_epoch=5"],
    )
    assert [row["status"] for row in tuner.result.trials] == ["COMPLETED", "COMPLETED"]
    best_hp = tuner.get_best_hyperparameters()[0]
    assert isinstance(best_hp, keras_tuner.HyperParameters)
    assert set(best_hp.values) == {"units", "activation"}
    assert best_hp.values == tuner.result.best["hp"]
    scores = [row["objective"] for row in tuner.result.trials]
    assert tuner.result.best["objective"]["value"] == pytest.approx(max(scores))

    model = tuner.get_best_models()[0]
    assert _dense_units(model)[0] == best_hp.values["units"]
    accuracy = model.evaluate(xv, yv, verbose=0, return_dict=True)["accuracy"]
    assert accuracy == pytest.approx(tuner.result.best["objective"]["value"], abs=0.01)
    # build_model(best_hp) is keras-tuner's way to a fresh model.
    assert _dense_units(build_model(best_hp))[0] == best_hp.values["units"]
    # The trials' config says where the hypermodel came from.
    assert (
        "model._target_=kdist.models.hypermodel.given_in_notebook" in tuner.result.best["overrides"]
    )


def test_notebook_search_with_a_dataset_goes_through_experiment_fit(tmp_path):
    import tensorflow as tf

    import kdist.tune

    (x, y), (xv, yv) = _digits()
    train = tf.data.Dataset.from_tensor_slices((x[:320], y[:320])).batch(32)
    val = tf.data.Dataset.from_tensor_slices((xv, yv)).batch(64)
    tuner = kdist.tune.search(
        hypermodels.build_model,
        train,
        validation_data=val,
        max_trials=2,
        epochs=1,
        directory=tmp_path / "search",
        overrides=["callbacks=minimal"],
    )
    rows = tuner.result.trials
    assert [row["status"] for row in rows] == ["COMPLETED", "COMPLETED"], rows
    assert rows[0]["objective_name"] == "val_loss"  # keras-tuner's default objective
    assert all(row["epochs"] == 1 for row in rows)
    best_hp = tuner.get_best_hyperparameters()[0]
    assert best_hp.values["units"] in (8, 16, 24, 32)
    # The trials trained on the dataset: 320 examples in batches of 32, one epoch.
    record = json.loads((tmp_path / "search" / rows[0]["run_dir"] / "metrics.json").read_text())
    assert record["steps"] == 10
    assert not (tmp_path / "search" / "data.npz").exists()
    with pytest.raises(ConfigError, match="cannot be given with a dataset"):
        kdist.tune.search(hypermodels.build_model, train, y, directory=tmp_path / "other")


def test_notebook_search_refuses_what_is_not_a_hypermodel(tmp_path):
    import kdist.tune

    with pytest.raises(ValueError, match="must be build_model"):
        kdist.tune.Tuner(kdist.models.mlp)
    (x, y), _ = _digits()
    with pytest.raises(ConfigError, match="34 in y"):
        kdist.tune.search(hypermodels.build_model, x, y[:34], directory=tmp_path)


@pytest.mark.slow
@pytest.mark.multiworker
def test_distributed_search_over_a_hypermodel(tmp_path, monkeypatch):
    """`kdist.launch --workers 2 --module kdist.tune` with a hypermodel: every tuner finds
    the same space (the chief checks it), both run trials of build_model(hp)."""
    import io

    from kdist.launch import run as launch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    run_dir = tmp_path / "tune"
    output = io.StringIO()
    code = launch(
        2,
        [
            "model=custom",
            "model._target_=hypermodels.build_model",
            "tuner.max_trials=4",
            "trainer=fast_dev",
            "callbacks=minimal",
            "tuner.verbose=0",
            "trainer.verbose=0",
            "tuner.distributed.timeout=30",
        ],
        module="kdist.tune",
        run_dir=run_dir,
        timeout=600,
        output=output,
    )
    assert code == 0, output.getvalue()[-4000:]
    rows = read_csv(run_dir / "trials.csv")
    assert len(rows) == 4 and {r["status"] for r in rows} == {"COMPLETED"}
    assert {r["tuner_id"] for r in rows} == {"chief", "worker1"}
    assert len({(r["model.hp.units"], r["model.hp.activation"]) for r in rows}) == 4
    best = yaml.safe_load((run_dir / "best.yaml").read_text())
    assert set(best["hp"]) == {"units", "activation"}


def test_best_trial_skips_a_completed_trial_not_yet_scored(tmp_path):
    """The chief's tuner marks its trial COMPLETED before `end_trial` scores it; a worker's
    trial ending in between writes best.yaml from the scored trials only."""
    from kdist.tuning import oracles, results

    cfg = compose(["tuner.max_trials=3"], config_name="tune")
    space = Space.from_config(cfg.tuner.space)
    oracle = oracles.build(cfg.tuner, hyperparameters=space.hyperparameters())
    oracle._set_project_dir(str(tmp_path), "kt")
    first, second = oracle.create_trial("chief"), oracle.create_trial("tuner1")
    oracle.update_trial(second.trial_id, {"val_accuracy": 0.5})
    first.status = oracles.TrialStatus.COMPLETED  # not scored yet
    second.status = oracles.TrialStatus.COMPLETED
    oracle.end_trial(second)
    assert first.score is None
    assert oracle.get_best_trials(1) == [second]
    assert results.best_trial(oracle) is second
