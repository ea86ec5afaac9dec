"""Keras's data arguments to `Experiment.fit`, repeated `fit`, and the one-call `kdist.fit`.

Data in hand trains as the same data from a config does: each case is compared with the
config-driven path (`data=npz` over a file the test writes with the same arrays).
Cost: ~40 s fast (2-3 s per small run on 2 cores); slow: the mirrored dataset cases,
a PyDataset under mirrored and the weights (~20 s).
"""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import compose
from omegaconf import OmegaConf

import kdist
from kdist.config.errors import ConfigError
from kdist.data.in_hand import given_data
from kdist.runs.fileio import read_csv

BASE = [
    "model=mlp",
    "model.units=[16]",
    "trainer.global_batch_size=32",
    "trainer.steps_per_execution=2",
    "trainer.epochs=2",
    "trainer.verbose=0",
    "callbacks=minimal",
]
STRATEGIES = ["strategy=one_device", "strategy=mirrored"]
# The mirrored cases of datasets are heavier (a pipeline per process, 2 devices): slow.
STRATEGIES_SLOW_MIRRORED = [
    "strategy=one_device",
    pytest.param("strategy=mirrored", marks=pytest.mark.slow),
]


def _arrays(n: int = 192, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 16)).astype("float32")
    return x, x[:, :4].argmax(axis=1).astype("int64")


X, Y = _arrays()
XV, YV = _arrays(64, seed=1)


def _weights(model: keras.Model) -> list[np.ndarray]:
    return [np.asarray(v) for v in model.get_weights()]


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert len(a) == len(b)
    return max(float(np.max(np.abs(i - j))) for i, j in zip(a, b, strict=True))


def _from_config(tmp_path: Path, extra: list[str], w: np.ndarray | None = None) -> kdist.Experiment:
    """The reference: the same arrays read by `data=npz` from a file (and sample weights
    `w`, with weights 1 for the validation arrays)."""
    path, validation = tmp_path / "data.npz", tmp_path / "validation.npz"
    weights = {} if w is None else {"w": w}
    np.savez(path, x=X, y=Y, **weights)
    np.savez(validation, x=XV, y=YV, **({} if w is None else {"w": np.ones(len(XV), "float32")}))
    overrides = [
        *BASE,
        *extra,
        "data=npz",
        f"data.source.path={path}",
        f"data.source.validation_path={validation}",
        *([] if w is None else ["data.source.weight_key=w"]),
    ]
    exp = kdist.Experiment(compose(overrides), run_dir=tmp_path / "config")
    exp.fit()
    return exp


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_arrays_train_as_the_config_driven_arrays(tmp_path: Path, strategy: str):
    # In order: shuffled arrays in hand are ordered by the seed and the epoch (as a
    # resumed run needs), config data by its shuffle buffer.
    reference = _from_config(tmp_path, [strategy, "data.shuffle=false"])
    exp = kdist.Experiment(compose([*BASE, strategy]), run_dir=tmp_path / "given")
    history = exp.fit(X, Y, validation_data=(XV, YV), shuffle=False)
    assert len(history.history["val_loss"]) == 2
    assert int(exp.optimizer.iterations.numpy()) == 12  # 192 // 32 a pass, 2 epochs
    assert _max_diff(_weights(exp.model), _weights(reference.model)) <= 1e-6
    # The run folder says where the data came from, and a later command cannot reread it;
    # the config itself keeps its own source (fit's data sets no key).
    assert exp.plan.given is not None and exp.plan.given["kind"] == "arrays"
    assert "kdist.data.in_hand.given" in (tmp_path / "given" / "config.yaml").read_text()
    assert "in_hand" not in str(exp.cfg.data.source.get("_target_"))


@pytest.mark.parametrize("strategy", STRATEGIES_SLOW_MIRRORED)
def test_a_dataset_of_examples_trains_as_the_arrays(tmp_path: Path, strategy: str):
    reference = _from_config(tmp_path, [strategy])
    exp = kdist.Experiment(compose([*BASE, strategy]), run_dir=tmp_path / "given")
    train = tf.data.Dataset.from_tensor_slices((X, Y))
    exp.fit(train, validation_data=tf.data.Dataset.from_tensor_slices((XV, YV)))
    assert int(exp.optimizer.iterations.numpy()) == 12
    assert _max_diff(_weights(exp.model), _weights(reference.model)) <= 1e-6


@pytest.mark.parametrize("strategy", STRATEGIES_SLOW_MIRRORED)
def test_a_batched_dataset_is_the_global_batch_in_its_order(tmp_path: Path, strategy: str):
    # Keras does not shuffle a dataset: the reference reads the arrays in order.
    reference = _from_config(tmp_path, [strategy, "data.shuffle=false"])
    exp = kdist.Experiment(
        compose([*BASE, strategy, "trainer.global_batch_size=8"]), run_dir=tmp_path / "given"
    )
    batches = tf.data.Dataset.from_tensor_slices((X, Y)).batch(32)
    exp.fit(batches, validation_data=(XV, YV))
    assert exp.plan.global_batch_size == 32  # the dataset's batch
    assert int(exp.cfg.trainer.global_batch_size) == 8  # the config as it was given
    assert int(exp.optimizer.iterations.numpy()) == 12
    assert _max_diff(_weights(exp.model), _weights(reference.model)) <= 1e-6


class Batches(keras.utils.PyDataset):
    """The arrays in batches of 32, in order; counts its passes."""

    def __init__(self, x: np.ndarray, y: np.ndarray, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.passes = x, y, 0

    def __len__(self) -> int:
        return len(self.x) // 32

    def __getitem__(self, index: int):
        part = slice(index * 32, (index + 1) * 32)
        return self.x[part], self.y[part]

    def on_epoch_end(self) -> None:
        self.passes += 1


@pytest.mark.slow
def test_a_py_dataset_trains_under_mirrored(tmp_path: Path):
    reference = _from_config(tmp_path, ["strategy=mirrored", "data.shuffle=false"])
    exp = kdist.Experiment(compose([*BASE, "strategy=mirrored"]), run_dir=tmp_path / "given")
    data = Batches(X, Y)
    # In order: Keras's fit shuffles a PyDataset's batches unless told not to.
    history = exp.fit(data, validation_data=(XV, YV), shuffle=False)
    assert exp.num_replicas == 2
    assert int(exp.optimizer.iterations.numpy()) == 12
    assert np.isfinite(history.history["loss"]).all()
    assert data.passes >= 1  # on_epoch_end runs at the end of each pass
    assert _max_diff(_weights(exp.model), _weights(reference.model)) <= 1e-6


def test_a_generator_trains_for_steps_per_epoch(tmp_path: Path):
    def batches():
        while True:
            for i in range(0, len(X), 32):
                yield X[i : i + 32], Y[i : i + 32]

    exp = kdist.Experiment(compose([*BASE, "strategy=mirrored"]), run_dir=tmp_path / "run")
    history = exp.fit(batches(), steps_per_epoch=3, epochs=2)
    assert int(exp.optimizer.iterations.numpy()) == 6
    assert len(history.history["loss"]) == 2


@pytest.mark.slow
def test_sample_and_class_weights_train_as_configured_ones(tmp_path: Path):
    # Keras refuses both together for arrays: each is compared on its own.
    w = np.linspace(0.5, 2.0, len(X)).astype("float32")
    class_weight = {0: 1.0, 1: 2.0, 2: 0.5, 3: 1.5}
    in_order = ["data.shuffle=false"]
    (tmp_path / "w").mkdir()
    (tmp_path / "c").mkdir()
    reference = _from_config(tmp_path / "w", in_order, w=w)
    exp = kdist.Experiment(compose(BASE), run_dir=tmp_path / "w" / "given")
    exp.fit(X, Y, sample_weight=w, validation_data=(XV, YV), shuffle=False)
    assert _max_diff(_weights(exp.model), _weights(reference.model)) <= 1e-6
    keyed = ["trainer.class_weight={0: 1.0, 1: 2.0, 2: 0.5, 3: 1.5}", *in_order]
    reference = _from_config(tmp_path / "c", keyed)
    exp = kdist.Experiment(compose(BASE), run_dir=tmp_path / "c" / "given")
    exp.fit(X, Y, class_weight=class_weight, validation_data=(XV, YV), shuffle=False)
    assert _max_diff(_weights(exp.model), _weights(reference.model)) <= 1e-6


def test_validation_split_keeps_the_last_fraction_before_shuffling(tmp_path: Path):
    exp = kdist.Experiment(compose([*BASE, "trainer.epochs=1"]), run_dir=tmp_path / "run")
    history = exp.fit(X, Y, validation_split=0.25, batch_size=16)
    train, validation = exp.source.arrays("train"), exp.source.arrays("validation")
    np.testing.assert_array_equal(train[0], X[:144])
    np.testing.assert_array_equal(validation[0], X[144:])
    assert int(exp.optimizer.iterations.numpy()) == 144 // 16
    assert "val_loss" in history.history


def test_a_second_fit_numbers_its_epochs_as_keras_and_the_run_history_goes_on(tmp_path: Path):
    run_dir = tmp_path / "run"
    exp = kdist.Experiment(compose([*BASE, "callbacks.csv.enabled=true"]), run_dir=run_dir)
    exp.fit(X, Y, validation_data=(XV, YV), epochs=2)
    assert int(exp.optimizer.iterations.numpy()) == 12
    history = exp.fit(X, Y, validation_data=(XV, YV), epochs=2)
    assert int(exp.optimizer.iterations.numpy()) == 24  # 2 epochs of 6 steps more
    # Keras's own two fits: the second numbers its epochs from initial_epoch (0) again.
    keras.utils.set_random_seed(0)
    reference = keras.Sequential([keras.Input((16,)), keras.layers.Dense(4)])
    reference.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    reference.fit(X, Y, epochs=2, verbose=0)
    expected = reference.fit(X, Y, epochs=2, verbose=0)
    assert history.epoch == expected.epoch and len(history.history["loss"]) == 2
    # kdist's run file goes on counting the run's epochs.
    rows = read_csv(run_dir / "history.csv")
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2, 3]
    # The same arrays again: the data stream goes on, as one fit of 4 epochs.
    once = kdist.Experiment(compose(BASE), run_dir=tmp_path / "once")
    once.fit(X, Y, validation_data=(XV, YV), epochs=4)
    assert _max_diff(_weights(exp.model), _weights(once.model)) <= 1e-6


def test_fit_arguments_set_no_config_key_and_the_folder_records_them(tmp_path: Path):
    # fit's data arguments make the run's data plan; the config stays as it was given,
    # config.yaml and metrics.json record what the run trained with, and a new
    # Experiment over the folder given the same data resumes it (the resume check
    # compares the folder's record with the same record).
    overrides = [*BASE, "callbacks.backup.enabled=true", "callbacks.backup.every_n_steps=4"]
    cfg = compose(overrides)
    before = _data_keys(cfg)
    run_dir = tmp_path / "run"
    exp = kdist.Experiment(cfg, run_dir=run_dir)
    arguments = dict(
        batch_size=16,
        shuffle=False,
        validation_data=(XV, YV),
        validation_freq=2,
        validation_batch_size=8,
        epochs=1,
    )
    exp.fit(X, Y, **arguments)
    assert _data_keys(exp.cfg) == before
    assert exp.plan.global_batch_size == 16 and exp.plan.shuffle is False
    record = OmegaConf.load(run_dir / "config.yaml")
    assert record.trainer.global_batch_size == 16 and record.data.shuffle is False
    assert record.trainer.validation_freq == 2 and record.trainer.validation_batch_size == 8
    assert record.data.source._target_ == "kdist.data.in_hand.given"
    assert record.data.source.train_examples == len(X)
    assert json.loads((run_dir / "metrics.json").read_text())["global_batch_size"] == 16
    assert int(exp.optimizer.iterations.numpy()) == 12  # 192 / 16
    resumed = kdist.Experiment(compose(overrides), run_dir=run_dir)
    resumed.fit(X, Y, **arguments)
    assert int(resumed.optimizer.iterations.numpy()) == 24  # the backup's 12, then 1 epoch
    # The config's own data again, with a batch of its own: the plan is the config's.
    again = kdist.Experiment(compose(BASE), run_dir=tmp_path / "config")
    again.fit(X, Y, batch_size=16, epochs=1)
    assert again.plan.global_batch_size == 16
    with pytest.raises(ConfigError, match="batch_size"):
        again.fit(X, Y, batch_size=32, epochs=2)  # a batch other than the one trained
    assert _data_keys(again.cfg) == _data_keys(compose(BASE))


def _data_keys(cfg: Any) -> dict[str, Any]:
    """The config's `data` and `trainer` nodes (the objective is resolved at the first fit)."""
    return {key: OmegaConf.to_container(cfg[key]) for key in ("data", "trainer")}


def test_a_fit_that_trains_nothing_says_so(tmp_path: Path, caplog):
    exp = kdist.Experiment(compose([*BASE, "trainer.epochs=1"]), run_dir=tmp_path / "run")
    exp.fit(X, Y)
    with caplog.at_level(logging.WARNING, logger="kdist.experiment"):
        exp.fit()  # the command line's meaning: trainer.epochs is reached
        exp.fit(epochs=2, initial_epoch=2)
    lines = [r.message for r in caplog.records if "fit trains nothing" in r.message]
    assert len(lines) == 2, lines
    assert "pass epochs=N" in lines[0]
    assert int(exp.optimizer.iterations.numpy()) == 6
    exp.fit(epochs=1)  # and then one more
    assert int(exp.optimizer.iterations.numpy()) == 12


@pytest.mark.slow  # 15-80 s on 2 cores: make test-all runs it
def test_a_dataset_resumed_mid_epoch_says_how_it_resumes(tmp_path: Path, caplog):
    # A dataset's iterator is not in the checkpoint: the resume says it skips batches.
    overrides = [
        *BASE,
        "callbacks.backup.enabled=true",
        "callbacks.backup.every_n_steps=2",
    ]
    run_dir, ds = tmp_path / "run", tf.data.Dataset.from_tensor_slices((X, Y))
    stopped = kdist.Experiment(
        compose([*overrides, "callbacks.extra=[{_target_: helpers.StopAtStep, step: 8}]"]),
        run_dir=run_dir,
    )
    stopped.fit(ds)
    assert int(stopped.optimizer.iterations.numpy()) == 8  # 2 steps into the second epoch
    with caplog.at_level(logging.WARNING, logger="kdist.experiment"):
        resumed = kdist.Experiment(compose(overrides), run_dir=run_dir)
        resumed.fit(ds)
    lines = [r.message for r in caplog.records if "middle of an epoch" in r.message]
    assert len(lines) == 1 and "first 2 batch(es) skipped" in lines[0], lines
    assert int(resumed.optimizer.iterations.numpy()) == 12


def test_data_given_after_build_model_builds_kdists_model_for_it(tmp_path: Path):
    # The config's data are the 8x8 digits; the arrays have 16 features.
    exp = kdist.Experiment(compose(["model=mlp", "trainer=fast_dev", "trainer.verbose=0"]))
    assert exp.build_model().input_shape == (None, 8, 8, 1)
    exp.fit(X, Y, epochs=1)
    assert exp.model.input_shape == (None, 16)


def test_a_users_model_waits_for_the_data_it_is_given(tmp_path: Path):
    exp = kdist.Experiment(compose([*BASE, "strategy=mirrored"]), run_dir=tmp_path / "run")
    with exp.strategy.scope():
        inputs = keras.Input((16,))
        model = keras.Model(inputs, keras.layers.Dense(4)(inputs))
    exp.build_model(model=model)  # the config's 8x8 digits do not fit it: not bound yet
    exp.fit(X, Y, epochs=1)
    assert int(exp.optimizer.iterations.numpy()) == 6


# -- bad input: one line naming the argument, before training --------------------------------


def _mlp_experiment(tmp_path: Path, *overrides: str) -> kdist.Experiment:
    exp = kdist.Experiment(compose([*BASE, *overrides]), run_dir=tmp_path / "run")
    with exp.strategy.scope():
        inputs = keras.Input((16,), name="features")
        model = keras.Model(inputs, keras.layers.Dense(4)(inputs))
    exp.build_model(model=model)
    return exp


def test_y_with_a_dataset_is_refused(tmp_path: Path):
    exp = _mlp_experiment(tmp_path)
    with pytest.raises(ConfigError, match=r"^y: must not be given with a tf.data.Dataset"):
        exp.fit(tf.data.Dataset.from_tensor_slices((X, Y)), Y)


def test_a_dataset_that_does_not_fit_the_model_is_refused(tmp_path: Path):
    exp = _mlp_experiment(tmp_path)
    wrong = tf.data.Dataset.from_tensor_slices((X[:, :10], Y))
    with pytest.raises(ConfigError, match=r"^x: does not have the shape of the model's inputs"):
        exp.fit(wrong)
    named = tf.data.Dataset.from_tensor_slices(({"other": X}, Y))
    # Keras's rule: a dict's keys are matched to the inputs' names; they are named.
    with pytest.raises(
        ConfigError, match=r"^x: has the keys \['other'\], but .* named \['features'\]"
    ):
        exp.fit(named)
    assert int(exp.optimizer.iterations.numpy()) == 0


@pytest.mark.parametrize(
    "strategy_class",
    [tf.distribute.MultiWorkerMirroredStrategy, tf.distribute.ParameterServerStrategy],
)
def test_a_generator_is_refused_where_workers_build_their_pipelines(strategy_class):
    strategy = mock.create_autospec(strategy_class, instance=True)

    def batches():
        yield X[:32], Y[:32]

    with pytest.raises(ConfigError, match=r"^x: a generator runs in this Python process"):
        given_data(batches(), steps_per_epoch=1, strategy=strategy)
    with pytest.raises(ConfigError, match=r"^x: a PyDataset runs in this Python process"):
        given_data(Batches(X, Y), strategy=strategy)


def test_other_bad_data_arguments(tmp_path: Path):
    strategy = tf.distribute.get_strategy()
    dataset = tf.data.Dataset.from_tensor_slices((X, Y))
    cases = [
        (dict(x=dataset, validation_split=0.2), r"^validation_split=0.2: works with NumPy"),
        (dict(x=X, y=Y[:10]), r"^y: has 10 examples, x has 192"),
        (dict(x=X, y=Y, validation_split=1.5), r"^validation_split=1.5: must be in \[0, 1\)"),
        (dict(x=dataset.batch(8), batch_size=16), r"^batch_size=16: must not be given"),
        # A validation generator without end and without validation_steps: Keras's
        # validation would run forever.
        (
            dict(x=X, y=Y, validation_data=(b for b in itertools.repeat((XV[:4], YV[:4])))),
            r"^validation_data: is a generator of more than 10000 batches",
        ),
        (dict(x=X, y=Y, validation_data=(XV,)), r"^validation_data=.*must be \(x_val, y_val\)"),
        (
            dict(x=X, y=Y, sample_weight=np.ones(len(X)), class_weight={0: 1.0}),
            r"^class_weight: cannot be given with sample_weight",
        ),
    ]
    for kwargs, pattern in cases:
        with pytest.raises(ConfigError, match=pattern):
            given_data(strategy=strategy, **kwargs)
    exp = _mlp_experiment(tmp_path)
    with pytest.raises(ConfigError, match=r"^validation_data: needs x"):
        exp.fit(validation_data=(XV, YV))


# -- kdist.fit ---------------------------------------------------------------------------------


def test_kdist_fit_in_one_call_under_mirrored(tmp_path: Path):
    def make_model() -> keras.Model:
        inputs = keras.Input((16,))
        return keras.Model(inputs, keras.layers.Dense(4)(inputs))

    history = kdist.fit(
        make_model,
        X,
        Y,
        epochs=2,
        validation_data=(XV, YV),
        strategy="mirrored",
        batch_size=32,
        verbose=0,
        overrides={"runtime.logical_devices": 2, "callbacks": "minimal"},
        run_dir=tmp_path / "run",
    )
    exp = history.experiment
    assert exp.num_replicas == 2
    # The factory ran inside the strategy's scope.
    assert type(exp.model.trainable_variables[0].value).__name__ == "MirroredVariable"
    assert len(history.history["val_loss"]) == 2
    assert int(exp.optimizer.iterations.numpy()) == 12
    with pytest.raises(ConfigError, match=r"^model='<lambda>': returned int, not a keras.Model"):
        kdist.fit(lambda: 3, X, Y, strategy="mirrored", overrides=["runtime.logical_devices=2"])
