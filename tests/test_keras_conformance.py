"""Keras conformance: every model that trains with `model.fit` trains the same with kdist.

Each case trains one kind of model the way Keras users write them, twice from the same
initial weights on the same batches: with kdist (`Experiment.fit`, 2 steps per call) and
with Keras's own `model.fit` on one device. The final weights must agree within 1e-5.
The same models then train under `strategy=mirrored` on 2 logical CPUs (the loss falls;
deterministic models also match one device). The multi-worker and parameter-server
variants are in the slow suite.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from conformance_models import (
    FEATURES,
    WORDS,
    batchnorm_dropout,
    dict_inputs,
    dict_outputs,
    functional,
    gan,
    l2_regularised,
    normalized,
    own_compute_loss,
    own_train_step,
    regressor,
    sequential,
    subclassed,
    text_lookup,
    two_outputs,
    vae,
)
from helpers import REPO, compose

import kdist
from kdist.config import ConfigError
from kdist.config.compile_rules import check_class_weight
from kdist.engine.building import optimizer_steps
from kdist.modeling.compiling import build_loss, build_loss_weights, build_metrics

EXAMPLES, BATCH, EPOCHS = 64, 16, 2
LEARNING_RATE = 0.01


# -- the data ------------------------------------------------------------------------------


def _arrays(kind: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(EXAMPLES, FEATURES)).astype("float32")
    labels = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0.5).astype("int64")
    arrays = {"x": x, "y": labels}
    if kind == "regression":
        arrays["y"] = (x @ rng.normal(size=(FEATURES,))).astype("float32")[:, None]
    if kind == "two_outputs":
        arrays = {"x": x, "cls": labels, "aux": x[:, :1] * 2.0}
    if kind == "dict_inputs":
        arrays = {"a": x, "b": rng.normal(size=(EXAMPLES, 4)).astype("float32"), "y": labels}
    if kind == "sample_weights":
        arrays["w"] = rng.uniform(0.2, 2.0, size=EXAMPLES).astype("float32")
    if kind == "unit":  # features in [0, 1]: the VAE's reconstruction is a sigmoid
        arrays["x"] = rng.uniform(size=(EXAMPLES, FEATURES)).astype("float32")
    if kind == "one_target":  # targets for `cls` alone
        arrays = {"x": x, "cls": labels}
    if kind == "scaled":  # far from zero mean and unit variance: what Normalization fixes
        arrays["x"] = x * np.linspace(1.0, 50.0, FEATURES).astype("float32") + 20.0
    if kind == "text":
        words = rng.integers(0, len(WORDS), size=(EXAMPLES, 2))
        arrays = {"x": np.array(WORDS)[words], "y": (words.sum(axis=1) % 3).astype("int64")}
    return arrays


@dataclass
class Case:
    name: str
    make: Callable[[], keras.Model]
    data: str = "classification"
    overrides: list[str] = field(default_factory=list)
    # Randomness inside the step (dropout) or per-replica statistics (batch norm):
    # mirrored training is not the same computation as one device.
    deterministic: bool = True
    # Compiled by its builder (its own `compile`): kept by kdist and by the reference.
    own_compile: bool = False
    # The builder adapts preprocessing on the training features (`x_train=`).
    adapts: bool = False
    # The metric that falls as it trains (a GAN's losses need not fall: `None`).
    falls: str | None = "loss"
    # Tests of this case in the slow suite (the fast suite's time is bounded).
    slow: tuple[str, ...] = ()
    # More overrides under parameter_server.
    ps_overrides: list[str] = field(default_factory=list)


CASES = [
    Case("functional", functional),
    Case("sequential", sequential),
    Case("subclassed_unbuilt", subclassed),
    Case(
        "custom_train_step",
        own_train_step,
        # It clips each replica's gradients by their own norm, before the all-reduce.
        deterministic=False,
    ),
    Case("custom_compute_loss", own_compute_loss),
    Case(
        "two_outputs_loss_dict",
        two_outputs,
        data="two_outputs",
        overrides=[
            "data.source.x_key=x",
            "data.source.y_key=[cls,aux]",
            "trainer.loss={cls: {_target_: keras.losses.SparseCategoricalCrossentropy, "
            "from_logits: true}, aux: mse}",
            "trainer.loss_weights={cls: 1.0, aux: 0.5}",
            "trainer.metrics={cls: [accuracy], aux: [mae]}",
        ],
    ),
    Case(
        "sample_weights", functional, data="sample_weights", overrides=["data.source.weight_key=w"]
    ),
    Case("class_weight", functional, overrides=["trainer.class_weight={0: 1.0, 1: 3.0, 2: 0.5}"]),
    Case(
        "regression_mse",
        regressor,
        data="regression",
        overrides=["trainer.loss=mse", "trainer.metrics=[mae]"],
    ),
    Case("dict_inputs", dict_inputs, data="dict_inputs", overrides=["data.source.x_key=[a,b]"]),
    Case("batchnorm_dropout", batchnorm_dropout, deterministic=False),
    Case("l2_regularisers", l2_regularised),
    # keras.io's VAE and GAN: their own train_step, metrics and compile; no `test_step`.
    # Under mirrored each replica's update is not scaled by the replica count (keras.io's
    # steps do not call `scale_loss`, as under `fit` with a strategy).
    Case(
        "vae_own_metrics",
        vae,
        data="unit",
        overrides=["trainer.validation=false"],
        deterministic=False,
        own_compile=True,
        falls="total_loss",
        slow=("mirrored",),
    ),
    Case(
        "gan_two_optimizers",
        gan,
        data="unit",
        overrides=["trainer.validation=false"],
        deterministic=False,
        own_compile=True,
        falls=None,
        slow=("fit", "mirrored"),
    ),
    Case(
        "dict_outputs_one_target",
        dict_outputs,
        data="one_target",
        overrides=[
            "data.source.x_key=x",
            "data.source.y_key=[cls]",
            "trainer.loss={cls: {_target_: keras.losses.SparseCategoricalCrossentropy, "
            "from_logits: true}, aux: null}",
            # Keras computes compiled metrics only with targets for every output.
            "trainer.metrics=[]",
        ],
        slow=("mirrored",),
    ),
    Case("normalization_adapted", normalized, data="scaled", adapts=True, slow=("mirrored",)),
    Case(
        "text_string_lookup",
        text_lookup,
        data="text",
        slow=("mirrored",),
        # The chief validates, and has no lookup table (see the test of the refusal).
        ps_overrides=["trainer.validation=false"],
    ),
]


def _params(test: str) -> list[Any]:
    """`CASES` for `test`, the costly ones marked slow."""
    return [
        pytest.param(case, id=case.name, marks=[pytest.mark.slow] if test in case.slow else [])
        for case in CASES
    ]


def _make(case: Case, source: Any) -> keras.Model:
    if case.adapts:
        return case.make(x_train=source.arrays("train")[0])
    return case.make()


def _config(case: Case, path: Path, run_dir: Path, extra: list[str]) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **_arrays(case.data))
    return compose(
        [
            "data=npz",
            f"data.source.path={path}",
            "data.source.validation_fraction=0.25",
            "data.cache=false",
            f"trainer.global_batch_size={BATCH}",
            f"trainer.epochs={EPOCHS}",
            "trainer.steps_per_execution=2",
            "trainer.verbose=0",
            "callbacks=minimal",
            "optimizer=adam",
            f"optimizer.learning_rate={LEARNING_RATE}",
            f"run_dir={run_dir}",
            *case.overrides,
            *extra,
        ]
    )


def _kdist(case: Case, tmp_path: Path, extra: list[str] = ()) -> tuple[Any, list[np.ndarray]]:
    """Train with kdist; returns the experiment and the initial weights."""
    cfg = _config(case, tmp_path / "data.npz", tmp_path / "run", list(extra))
    exp = kdist.Experiment(cfg)
    keras.utils.set_random_seed(1)
    with exp.strategy.scope():
        model = _make(case, exp.source)
    exp.build_model(model=model)
    # A model whose layers build on their first call is built by `fit`, on its first
    # batch (as Keras's `fit` builds it): its initial weights exist when training begins.
    initial = _InitialWeights()
    exp.fit(callbacks=[initial])
    return exp, initial.weights


class _InitialWeights(keras.callbacks.Callback):
    weights: list[np.ndarray]

    def on_train_begin(self, logs: Any = None) -> None:
        self.weights = [np.array(w) for w in self.model.get_weights()]


def _fit(case: Case, exp: Any, initial: list[np.ndarray]) -> keras.Model:
    """Train the same model with Keras's `fit` on one device, on kdist's batches."""
    cfg = exp.cfg
    keras.utils.set_random_seed(1)
    model = _make(case, exp.source)
    if not case.own_compile:
        model.compile(
            optimizer=keras.optimizers.Adam(LEARNING_RATE),
            loss=build_loss(cfg.trainer.get("loss")),
            loss_weights=build_loss_weights(cfg.trainer.get("loss_weights")),
            metrics=build_metrics(cfg.trainer.get("metrics"), cfg.trainer.get("loss")),
        )
    dataset_fn = kdist.data.make_dataset_fn(
        exp.source,
        "train",
        cfg.data,
        global_batch_size=BATCH,
        seed=int(cfg.runtime.seed),
    )
    x, *_ = next(iter(dataset_fn(tf.distribute.InputContext())))
    if type(model).call is not keras.Model.call:  # keras.io's VAE and GAN have none
        model(x)
    model.set_weights(initial)
    # A new dataset, made under the same global seed as kdist's: the same shuffle order.
    keras.utils.set_random_seed(1)
    stream = dataset_fn(tf.distribute.InputContext())
    # One long epoch: Keras starts a new iterator of a dataset every epoch, kdist's
    # stream runs on across epochs (so that a resumed run continues it exactly).
    model.fit(
        stream,
        epochs=1,
        steps_per_epoch=EPOCHS * exp.steps_per_epoch,
        shuffle=False,  # the stream is kdist's, already shuffled
        verbose=0,
        class_weight=check_class_weight(cfg.trainer.get("class_weight")),
    )
    return model


# A head with no loss (`trainer.loss.aux: null`) gets no gradient: Keras warns, as in `fit`.
_NO_GRADIENT = pytest.mark.filterwarnings("ignore:Gradients do not exist:UserWarning")


@_NO_GRADIENT
@pytest.mark.parametrize("case", _params("fit"))
def test_kdist_trains_like_fit(case: Case, tmp_path: Path):
    exp, initial = _kdist(case, tmp_path)
    reference = _fit(case, exp, initial)
    trained = exp.model.get_weights()
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(trained, initial, strict=True))
    assert moved > 1e-3, "training did not change the weights"
    assert len(trained) == len(reference.get_weights())
    for ours, theirs in zip(trained, reference.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    assert optimizer_steps(exp.model) == EPOCHS * exp.steps_per_epoch


@_NO_GRADIENT
@pytest.mark.parametrize("case", _params("mirrored"))
def test_trains_under_mirrored(case: Case, tmp_path: Path):
    exp, _ = _kdist(
        case,
        tmp_path / "mirrored",
        ["strategy=mirrored", "trainer.epochs=4", "optimizer.learning_rate=0.02"],
    )
    assert exp.num_replicas == 2
    history = exp.result.history.history
    if case.falls:
        assert history[case.falls][-1] < history[case.falls][0]
    assert all(np.isfinite(v[-1]) for v in history.values())
    assert optimizer_steps(exp.model) == 4 * exp.steps_per_epoch
    if case.deterministic:
        one, _ = _kdist(
            case, tmp_path / "one", ["trainer.epochs=4", "optimizer.learning_rate=0.02"]
        )
        for a, b in zip(exp.model.get_weights(), one.model.get_weights(), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_regression_logs_val_mae_and_objective_defaults_to_val_loss(tmp_path: Path):
    case = next(c for c in CASES if c.name == "regression_mse")
    exp, _ = _kdist(case, tmp_path)
    assert exp.cfg.objective.name == "val_loss"
    assert exp.cfg.objective.direction == "min"
    assert {"val_loss", "val_mae", "loss", "mae"} <= set(exp.result.final_logs)


def test_float_targets_with_a_classification_loss_are_refused(tmp_path: Path):
    case = Case("float_targets", regressor, data="regression")
    cfg = _config(case, tmp_path / "data.npz", tmp_path / "run", [])
    exp = kdist.Experiment(cfg)
    exp.build_model(model=regressor())  # the config's data is checked at the call using it
    with pytest.raises(ConfigError, match=r"trainer.loss.*integer class ids.*mse"):
        exp.fit()
    assert exp.controller is None  # refused before any step


def test_loss_keys_must_be_output_names(tmp_path: Path):
    case = next(c for c in CASES if c.name == "two_outputs_loss_dict")
    cfg = _config(
        case,
        tmp_path / "data.npz",
        tmp_path / "run",
        ["+trainer.loss.extra=mse"],
    )
    exp = kdist.Experiment(cfg)
    with pytest.raises(ConfigError, match=r"trainer.loss.extra.*outputs: (cls, aux|aux, cls)"):
        exp.build_model(model=two_outputs())


def test_unknown_loss_name_is_a_config_error(tmp_path: Path):
    cfg = _config(CASES[0], tmp_path / "data.npz", tmp_path / "run", ["trainer.loss=msee"])
    exp = kdist.Experiment(cfg)
    with pytest.raises(ConfigError, match=r"trainer.loss.*not a Keras loss.*mse"):
        exp.build_model(model=functional())


def test_a_compiled_model_keeps_its_compile(tmp_path: Path):
    cfg = _config(CASES[0], tmp_path / "data.npz", tmp_path / "run", ["strategy=mirrored"])
    exp = kdist.Experiment(cfg)
    # Made and compiled outside the strategy's scope, as in a notebook.
    model = functional()
    model.compile(
        optimizer=keras.optimizers.SGD(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="acc")],
    )
    built = exp.build_model(model=model)
    assert built is not model  # rebuilt in the mirrored scope
    assert isinstance(built.optimizer, keras.optimizers.SGD)
    assert float(built.optimizer.learning_rate.numpy()) == pytest.approx(0.05)
    history = exp.fit()
    assert "acc" in history.history and "val_acc" in history.history


# -- the same models on a local cluster (slow) ---------------------------------------------


def _cluster_run(case: Case, tmp_path: Path, monkeypatch, *, ps: int) -> tuple[int, str, Path]:
    import io

    from kdist.launch import run

    data = tmp_path / "data.npz"
    np.savez(data, **_arrays(case.data))
    tests = str(REPO / "tests")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))
    )
    strategy = "parameter_server" if ps else "multi_worker_mirrored"
    run_dir = tmp_path / "run"
    log = io.StringIO()
    code = run(
        2,
        [
            f"strategy={strategy}",
            "model=custom",
            f"model._target_=conformance_models.{case.make.__name__}",
            "data=npz",
            f"data.source.path={data}",
            "data.source.validation_fraction=0.25",
            f"trainer.global_batch_size={BATCH}",
            "trainer.epochs=4",
            "trainer.steps_per_execution=2",
            "trainer.verbose=2",
            "callbacks=minimal",
            "callbacks.csv.enabled=true",
            "optimizer.learning_rate=0.02",
            *case.overrides,
            *([f"+model.data={data}"] if case.adapts else []),
            *(case.ps_overrides if ps else []),
        ],
        ps=ps,
        run_dir=run_dir,
        timeout=300,
        output=log,
    )
    return code, log.getvalue(), run_dir


def _history(run_dir: Path) -> list[dict[str, float]]:
    import csv

    with (run_dir / "history.csv").open(newline="") as handle:
        return [
            {k: float(v) for k, v in row.items() if v not in ("", "NA")}
            for row in csv.DictReader(handle)
        ]


def _check_cluster_history(case: Case, run_dir: Path) -> None:
    rows = _history(run_dir)
    assert len(rows) == 4, rows
    assert all(np.isfinite(v) for row in rows for v in row.values()), rows
    if case.falls:
        assert rows[-1][case.falls] < rows[0][case.falls], rows


@pytest.mark.slow
@pytest.mark.multiworker
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_trains_under_multi_worker_mirrored(case: Case, tmp_path: Path, monkeypatch):
    code, text, run_dir = _cluster_run(case, tmp_path, monkeypatch, ps=0)
    assert code == 0, text[-3000:]
    _check_cluster_history(case, run_dir)
    summary = json.loads((run_dir / "metrics.json").read_text())
    assert summary["num_replicas"] == 2 and summary["steps"] == 4 * 3


@pytest.mark.slow
@pytest.mark.multiworker
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_trains_under_parameter_server(case: Case, tmp_path: Path, monkeypatch):
    code, text, run_dir = _cluster_run(case, tmp_path, monkeypatch, ps=1)
    assert code == 0, text[-3000:]
    _check_cluster_history(case, run_dir)
    summary = json.loads((run_dir / "metrics.json").read_text())
    # Every scheduled step applied exactly once (the atomic counters).
    assert summary["steps"] == 4 * 3


def test_own_train_step_with_sharded_variables_is_refused(tmp_path: Path, monkeypatch):
    # Sharded variables need a parameter-server cluster; the rule is what is tested here
    # (a model's own train_step updates `trainable_variables`, which Keras 3 cannot do
    # for a ShardedVariable).
    monkeypatch.setattr("kdist.engine.step.has_sharded_variables", lambda model: True)
    cfg = _config(CASES[0], tmp_path / "data.npz", tmp_path / "run", [])
    exp = kdist.Experiment(cfg)
    exp.build_model(model=own_train_step())  # unbuilt: `fit` builds it, on its first batch
    with pytest.raises(ConfigError, match=r"^model=.*overrides `train_step`.*sharded"):
        exp.fit()
    assert exp.result is None


def test_bad_loss_from_the_command_line_exits_2_with_one_line(tmp_path: Path):
    from helpers import run_module

    data = tmp_path / "data.npz"
    np.savez(data, **_arrays("regression"))
    result = run_module(
        "kdist.train",
        [
            "data=npz",
            f"data.source.path={data}",
            "trainer.epochs=1",
            f"trainer.global_batch_size={BATCH}",
            "hydra.run.dir=run",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("kdist:")]
    assert len(lines) == 1 and "trainer.loss" in lines[0] and "integer class ids" in lines[0]
    assert "Traceback" not in result.stderr


def test_validation_of_a_lookup_table_model_under_parameter_servers_is_refused():
    from kdist.experiment.build import check_lookup_tables

    model = text_lookup()
    check_lookup_tables(model, parameter_server=True, validates=False)
    check_lookup_tables(model, parameter_server=False, validates=True)
    check_lookup_tables(functional(), parameter_server=True, validates=True)
    with pytest.raises(ConfigError) as caught:
        check_lookup_tables(model, parameter_server=True, validates=True)
    assert caught.value.key == "trainer.validation" and "\n" not in str(caught.value)
    assert "string_lookup" in str(caught.value) and "trainer.validation=false" in str(caught.value)
