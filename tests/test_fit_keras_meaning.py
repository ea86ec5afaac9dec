"""Data in hand means what it means in Keras's `fit`, `evaluate` and `predict` (issue 37).

Each case trains the same model with `model.fit` (the reference, under the same strategy)
and with `Experiment.fit`: a partial last batch every epoch (281 examples, batch 32, so 9
steps an epoch with kdist's 8 steps a call), a `timeseries_dataset_from_array` dataset,
a dict `x` keyed by input names; `evaluate(x, y)` and `predict(x)` against Keras's.
Cost: ~3 s a case on one device; the mirrored ones (~10 s) are in slow_cases.txt.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import kdist
from kdist.config.errors import ConfigError
from kdist.data.in_hand.arrays import FitArrays
from kdist.experiment.fit_arguments import FitArguments, check_count

STRATEGIES = {
    "one_device": ["strategy=one_device"],
    "mirrored": ["strategy=mirrored", "runtime.logical_devices=2"],
}
BASE = ["trainer.epochs=3", "trainer.verbose=0", "callbacks=minimal"]

RNG = np.random.default_rng(0)
X = RNG.normal(size=(281, 8)).astype("float32")
Y = RNG.integers(0, 3, 281)


def _model(inputs: int = 1) -> keras.Model:
    keras.utils.set_random_seed(1)
    names = [f"in_{i}" for i in range(inputs)]
    given = [keras.Input((8,), name=name) for name in names]
    joined = given[0] if inputs == 1 else keras.layers.Concatenate()(given)
    hidden = keras.layers.Dense(16, activation="relu")(joined)
    model = keras.Model(given if inputs > 1 else given[0], keras.layers.Dense(3)(hidden))
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _experiment(
    tmp_path: Path, strategy: str, inputs: int = 1
) -> tuple[kdist.Experiment, keras.Model]:
    """An Experiment holding `_model()`, and the same model for `model.fit` (both in
    the Experiment's strategy's scope)."""
    exp = kdist.Experiment(kdist.compose([*BASE, *STRATEGIES[strategy]]), run_dir=tmp_path)
    with exp.strategy.scope():
        reference = _model(inputs)
        model = _model(inputs)
    exp.build_model(model=model)
    return exp, reference


def _max_diff(a: keras.Model, b: keras.Model) -> float:
    pairs = zip(a.get_weights(), b.get_weights(), strict=True)
    return max(float(np.abs(i - j).max()) for i, j in pairs)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_the_partial_last_batch_trains_as_in_fit(tmp_path: Path, strategy: str):
    exp, reference = _experiment(tmp_path, strategy)
    reference.fit(X, Y, batch_size=32, epochs=3, shuffle=False, verbose=0)
    exp.fit(X, Y, batch_size=32, epochs=3, shuffle=False)
    assert exp.steps_per_epoch == 9  # 8 batches of 32 and one of 25
    assert int(exp.model.optimizer.iterations.numpy()) == 27
    assert _max_diff(exp.model, reference) <= 1e-5


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_timeseries_dataset_trains_as_in_fit(tmp_path: Path, strategy: str):
    def dataset() -> tf.data.Dataset:  # 274 windows of 8 steps of one feature: 9 batches
        return keras.utils.timeseries_dataset_from_array(
            X[:, 0], Y[7:], sequence_length=8, batch_size=32
        )

    exp, reference = _experiment(tmp_path, strategy)
    expected = reference.fit(
        dataset(), epochs=3, verbose=0, shuffle=False, validation_data=dataset()
    )
    history = exp.fit(dataset(), epochs=3, validation_data=dataset())
    assert exp.steps_per_epoch == 9
    assert _max_diff(exp.model, reference) <= 1e-5
    # Validation as in fit: the same batches, cut over the replicas as fit cuts them.
    np.testing.assert_allclose(
        history.history["val_loss"], expected.history["val_loss"], atol=1e-5, rtol=0
    )


class Batches(keras.utils.PyDataset):
    """X, Y in batches of 32, the last of 25."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.passes = 0

    def __len__(self) -> int:
        return 9

    def __getitem__(self, index: int):
        part = slice(index * 32, (index + 1) * 32)
        return X[part], Y[part]

    def on_epoch_end(self) -> None:
        self.passes += 1


def test_a_py_dataset_trains_as_in_fit_and_shuffles_its_batches(tmp_path: Path):
    exp, reference = _experiment(tmp_path, "one_device")
    reference.fit(Batches(), epochs=3, shuffle=False, verbose=0)
    data = Batches()
    exp.fit(data, epochs=3, shuffle=False)
    assert exp.steps_per_epoch == 9 and data.passes >= 3
    assert _max_diff(exp.model, reference) <= 1e-5
    # shuffle (fit's default): the batches in a new order every epoch, so other weights.
    shuffled, _ = _experiment(tmp_path / "shuffled", "one_device")
    shuffled.fit(Batches(), epochs=3)
    assert _max_diff(shuffled.model, reference) > 1e-4


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_dict_keyed_by_input_names_trains_as_in_fit(tmp_path: Path, strategy: str):
    exp, reference = _experiment(tmp_path, strategy, inputs=2)
    x = {"in_1": X[:, ::-1].copy(), "in_0": X}
    reference.fit(x, Y, batch_size=32, epochs=3, shuffle=False, verbose=0)
    exp.fit(x, Y, batch_size=32, epochs=3, shuffle=False)
    assert _max_diff(exp.model, reference) <= 1e-5


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_evaluate_and_predict_take_data_as_keras_does(tmp_path: Path, strategy: str):
    exp, reference = _experiment(tmp_path, strategy)
    reference.fit(X, Y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    exp.fit(X, Y, batch_size=32, epochs=1, shuffle=False)
    expected = reference.evaluate(X, Y, verbose=0)
    got = exp.evaluate(X, Y)
    assert isinstance(got, list) and len(got) == 2  # Keras's form: [loss, accuracy]
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
    as_dict = exp.evaluate(X, Y, return_dict=True, batch_size=50)
    assert as_dict["loss"] == pytest.approx(expected[0], abs=1e-6)
    np.testing.assert_allclose(exp.predict(X), reference.predict(X, verbose=0), atol=1e-6)
    # Without data: the validation split, as a dict (the run-folder form).
    assert isinstance(exp.evaluate(), dict)


def test_a_resumed_stream_reads_the_same_batches_partial_one_included():
    source = FitArrays(
        x_train=np.arange(10, dtype="float32")[:, None],
        y_train=np.arange(10),
        x_validation=np.zeros((0, 1), "float32"),
        y_validation=np.zeros((0,), "int64"),
    )
    assert source.steps_per_pass(4) == 3  # 4, 4 and 2

    def steps(first: int, count: int) -> list[list[int]]:
        ds = source.train_batches(4, seed=3, shuffle=True, first_step=first).take(count)
        return [b[1].numpy().tolist() for b in ds]

    whole = steps(0, 9)
    assert [len(b) for b in whole] == [4, 4, 2] * 3
    assert sorted(i for batch in whole[:3] for i in batch) == list(
        range(10)
    )  # each pass: every example once
    assert whole[:3] != whole[3:6]  # a new order each pass, drawn from the seed
    for first in (1, 2, 4, 5):
        assert steps(first, 9 - first) == whole[first:]
    assert steps(0, 9) == whole  # the same seed, the same order


def test_a_run_resumed_mid_epoch_reads_the_same_shuffled_batches(tmp_path: Path):
    # Shuffled (the order drawn from the seed and the epoch), 8 steps a call, a backup
    # every 4 steps, stopped at step 12 (the second epoch's fourth step), resumed.
    backup = ["callbacks.backup.enabled=true", "callbacks.backup.every_n_steps=4"]
    stop = "callbacks.extra=[{_target_: helpers.StopAtStep, step: 12}]"

    def experiment(run_dir: Path, extra: list[str]) -> kdist.Experiment:
        exp = kdist.Experiment(kdist.compose([*BASE, *backup, *extra]), run_dir=run_dir)
        with exp.strategy.scope():
            model = _model()
        exp.build_model(model=model)
        return exp

    whole = experiment(tmp_path / "whole", [])
    whole.fit(X, Y, batch_size=32)
    stopped = experiment(tmp_path / "run", [stop])
    stopped.fit(X, Y, batch_size=32)
    assert int(stopped.model.optimizer.iterations.numpy()) == 12
    resumed = experiment(tmp_path / "run", [])
    resumed.fit(X, Y, batch_size=32)
    assert int(resumed.model.optimizer.iterations.numpy()) == 27
    assert _max_diff(resumed.model, whole.model) <= 1e-6


def test_fit_takes_keras_fit_arguments():
    keras_names = list(inspect.signature(keras.Model.fit).parameters)[1:]
    ours = list(inspect.signature(kdist.Experiment.fit).parameters)[1:]
    assert ours == keras_names
    assert [field.name for field in dataclasses.fields(FitArguments)] == keras_names
    keras_eval = set(inspect.signature(keras.Model.evaluate).parameters) - {"self", "kwargs"}
    assert keras_eval <= set(inspect.signature(kdist.Experiment.evaluate).parameters)
    keras_predict = set(inspect.signature(keras.Model.predict).parameters) - {"self"}
    assert keras_predict <= set(inspect.signature(kdist.Experiment.predict).parameters)


class Failing(keras.utils.PyDataset):
    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: int):
        if index == 2:
            raise KeyError("no such file")
        return X[:4], Y[:4]


BAD = {
    "lengths": (dict(x=X, y=Y[:-1]), "y"),
    "y with a dataset": (dict(x=tf.data.Dataset.from_tensor_slices((X, Y)).batch(8), y=Y), "y"),
    "validation_split above 1": (dict(x=X, y=Y, validation_split=1.5), "validation_split"),
    "validation_split with a dataset": (
        dict(x=tf.data.Dataset.from_tensor_slices((X, Y)).batch(8), validation_split=0.2),
        "validation_split",
    ),
    "sample_weight length": (dict(x=X, y=Y, sample_weight=np.ones(3)), "sample_weight"),
    "class_weight beyond one-hot": (
        dict(x=X, y=np.eye(3)[Y], class_weight={0: 1.0, 5: 2.0}),
        "class_weight",
    ),
    "negative labels with class_weight": (
        dict(x=X, y=Y - 1, class_weight={0: 1.0, 1: 2.0}),
        "y",
    ),
    "object dtype": (dict(x=np.array([object()] * 281), y=Y), "x"),
    "steps_per_epoch=-3": (dict(x=X, y=Y, steps_per_epoch=-3), "steps_per_epoch"),
    "NaN": (dict(x=np.where(X > 2, np.nan, X), y=Y), "x"),
    "batch_size=0": (dict(x=X, y=Y, batch_size=0), "batch_size"),
    "batch_size=-4": (dict(x=X, y=Y, batch_size=-4), "batch_size"),
    "0 rows": (dict(x=X[:0], y=Y[:0]), "x"),
    "epochs as text": (dict(x=X, y=Y, epochs="two"), "epochs"),
    "validation_data of the wrong shape": (
        dict(x=X, y=Y, validation_data=(X[:, :5], Y)),
        "validation_data",
    ),
    "a PyDataset raising": (dict(x=Failing()), "x"),
    "dict keys not the input names": (dict(x={"a": X}, y=Y), "x"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_data_is_one_line_naming_the_argument_before_training(tmp_path: Path, case: str):
    arguments, key = BAD[case]
    exp, _ = _experiment(tmp_path / "run", "one_device")
    with pytest.raises(ConfigError) as error:
        exp.fit(**arguments)
    assert error.value.key == key, str(error.value)
    assert "\n" not in str(error.value)
    assert exp.model.optimizer.iterations.numpy() == 0
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_evaluate_and_predict_refuse_data_the_model_cannot_take(tmp_path: Path):
    exp, _ = _experiment(tmp_path, "one_device")
    exp.fit(X[:64], Y[:64], epochs=1)
    with pytest.raises(ConfigError, match=r"^x: ") as error:
        exp.evaluate(X[:, :5], Y)
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match=r"^x: "):
        exp.predict(X[:, :5])
    with pytest.raises(ConfigError) as error:
        exp.predict(X, batch_size=0)
    assert error.value.key == "batch_size"


def test_check_count_refuses_what_is_not_a_positive_integer():
    for value in (0, -3, 2.5, "two", True):
        with pytest.raises(ConfigError) as error:
            check_count("epochs", value)
        assert error.value.key == "epochs"
    check_count("epochs", 3)


def test_a_target_key_that_names_no_output_is_refused(tmp_path: Path):
    exp = kdist.Experiment(kdist.compose([*BASE, "strategy=one_device"]), run_dir=tmp_path)
    with exp.strategy.scope():
        inputs = keras.Input((8,))
        model = keras.Model(inputs, {"cls": keras.layers.Dense(3)(inputs)})
        model.compile(optimizer="sgd", loss={"cls": "sparse_categorical_crossentropy"})
    exp.build_model(model=model)
    with pytest.raises(ConfigError) as error:
        exp.fit(X, {"class": Y})
    assert error.value.key == "y" and "['class']" in str(error.value)
    assert "'cls'" in str(error.value)


def test_a_generator_under_parameter_servers_is_told_what_they_take():
    from unittest import mock

    from kdist.data.in_hand import given_data

    strategy = mock.create_autospec(tf.distribute.ParameterServerStrategy, instance=True)

    def batches():
        yield X[:32], Y[:32]

    with pytest.raises(ConfigError) as error:
        given_data(batches(), steps_per_epoch=1, strategy=strategy)
    assert "tf.data.Dataset" not in str(error.value)  # which parameter servers refuse too
    assert "NumPy arrays" in str(error.value)


def test_kdist_fit_refuses_epochs_as_text_before_setting_up(tmp_path: Path):
    with pytest.raises(ConfigError) as error:
        kdist.fit(_model, X, Y, epochs="two", run_dir=tmp_path / "run")
    assert error.value.key == "epochs"
    assert not (tmp_path / "run").exists()


# The worker's own copy of X, Y and `_model` (importing this module would start
# TensorFlow's runtime before the strategy configures its collectives).
WORKER = """
import sys, tempfile
import numpy as np, keras, kdist
rng = np.random.default_rng(0)
X = rng.normal(size=(281, 8)).astype("float32")
Y = rng.integers(0, 3, 281)
exp = kdist.Experiment(
    kdist.compose([*sys.argv[2].split(), "strategy=multi_worker_mirrored"]),
    run_dir=tempfile.mkdtemp(),
)
with exp.strategy.scope():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((8,), name="in_0")
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3)(hidden))
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
exp.build_model(model=model)
exp.fit(X, Y, batch_size=32, epochs=3, shuffle=False)
np.savez(sys.argv[1], *exp.model.get_weights(), steps=exp.steps_per_epoch)
"""


@pytest.mark.multiworker
def test_the_partial_last_batch_under_two_workers_trains_as_under_mirrored(tmp_path: Path):
    # Keras's `fit` cannot run MultiWorkerMirroredStrategy (FACTS.md); kdist under mirrored
    # equals it (above), and two workers cut each global batch as mirrored's two replicas.
    import json
    import os
    import subprocess
    import sys

    from helpers import free_port

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    processes = []
    for index in range(2):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        env = os.environ | {"TF_CONFIG": json.dumps(tf_config)}
        out = tmp_path / f"worker{index}.npz"
        arguments = [sys.executable, str(script), str(out), " ".join(BASE)]
        processes.append(subprocess.Popen(arguments, env=env, cwd=tmp_path))
    assert [p.wait(timeout=600) for p in processes] == [0, 0]
    exp, _ = _experiment(tmp_path / "mirrored", "mirrored")
    exp.fit(X, Y, batch_size=32, epochs=3, shuffle=False)
    for index in range(2):
        saved = np.load(tmp_path / f"worker{index}.npz")
        assert int(saved["steps"]) == 9
        weights = [saved[f"arr_{i}"] for i in range(len(exp.model.get_weights()))]
        pairs = zip(weights, exp.model.get_weights(), strict=True)
        assert max(float(np.abs(a - b).max()) for a, b in pairs) <= 1e-6


def test_text_is_read_as_keras_reads_it():
    from kdist.data.in_hand import check_inputs
    from kdist.data.in_hand.arrays import as_arrays

    # A pandas text column (objects that are all str) and a tf.string tensor (bytes).
    assert as_arrays(np.array(["a", "bc"], dtype=object), "x").dtype.kind == "U"
    assert as_arrays(tf.constant([[b"a"], [b"bc"]]), "x").dtype.kind == "S"
    # Strings of shape (n,) for keras.Input((1,), dtype="string"): Keras adds the axis.
    text = keras.Input((1,), dtype="string", name="text")
    model = keras.Model(text, keras.layers.StringLookup(vocabulary=["a"])(text))
    check_inputs(model, (tf.TensorSpec((), tf.string),), key="x", needs_targets=False)
    with pytest.raises(ConfigError) as error:
        check_inputs(model, (tf.TensorSpec((3,), tf.string),), key="x", needs_targets=False)
    assert error.value.key == "x"


def test_a_zip_of_datasets_batched_by_different_sizes_is_counted_without_unbatching():
    # keras.io's semi-supervised SimCLR zips 128 unlabeled images in batches of 16 with
    # 64 labeled ones in batches of 8: `unbatch()` of that zip fails, and fit never does it.
    from kdist.data.in_hand.datasets import count_batches

    unlabeled = tf.data.Dataset.from_tensor_slices(np.zeros((128, 2), "float32")).batch(16)
    labeled = tf.data.Dataset.from_tensor_slices(np.zeros((64, 2), "float32")).batch(8)
    zipped = tf.data.Dataset.zip((unlabeled, labeled)).filter(lambda *_: True)
    assert int(zipped.cardinality()) < 0  # unknown: counted by reading one pass
    assert count_batches(zipped, "x") == (8, 128)  # 8 batches of 16 zipped with 8 of 8


def test_a_batch_without_targets_reaches_train_step_as_fit_packs_it():
    # keras.io's VAE: `fit(images)` hands `train_step` the images, not `(images,)`.
    from kdist.engine.step import as_fit_packs

    x, y = np.zeros((2, 3)), np.zeros((2,))
    assert as_fit_packs((x,)) is x
    assert as_fit_packs((x, y))[1] is y
    several = as_fit_packs(((x, x),))  # a tuple of inputs stays one x
    assert isinstance(several, tuple) and len(several) == 1 and len(several[0]) == 2
