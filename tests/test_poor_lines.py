"""Issue 43's POOR cases: each a one-line refusal naming the argument, before training.
Cost: ~40 s."""

from __future__ import annotations

import re
from pathlib import Path

import keras
import numpy as np
import pytest

import kdist
from kdist.config.errors import ConfigError


def _three_classes() -> keras.Model:
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])


def _functional_three_classes() -> keras.Model:
    inputs = keras.Input((4,))
    return keras.Model(inputs, keras.layers.Dense(3)(inputs))


def _arrays(label: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=32)
    y[5] = label
    return rng.random((32, 4), dtype=np.float32), y


# --- a class id the model has no output for ------------------------------------------------


@pytest.mark.parametrize("label", [7, -1])
@pytest.mark.parametrize("class_weight", [None, {0: 1.0, 1: 2.0, 2: 1.0}])
@pytest.mark.parametrize("make", [_three_classes, _functional_three_classes])
def test_a_class_id_beyond_the_outputs_is_one_line_naming_y(
    tmp_path: Path, label: int, class_weight, make
):
    x, y = _arrays(label)
    model = make()
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(ConfigError) as refused:
        kdist.fit(model, x, y, class_weight=class_weight, run_dir=tmp_path / "run", verbose=0)
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith("y: "), line
    assert str(label) in line and "class id" in line, line
    # Refused before training: the weights are those the model came with.
    for a, b in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_class_id_beyond_the_outputs_of_a_factory_model_is_refused(tmp_path: Path):
    x, y = _arrays(7)
    with pytest.raises(ConfigError, match=r"^y: has 1 label\(s\) outside \[0, 3\): 7"):
        kdist.fit(_three_classes, x, y, run_dir=tmp_path / "run", verbose=0)


# --- a PyDataset whose __getitem__ raises in the middle of an epoch -------------------------


class _BreaksAtFour(keras.utils.PyDataset):
    """Six batches of four features and class ids 0..2; item 4 raises."""

    def __init__(self) -> None:
        super().__init__()

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int):
        if index == 4:
            raise KeyError(f"no row {index}")
        rng = np.random.default_rng(index)
        return rng.random((8, 4), dtype=np.float32), rng.integers(0, 3, 8)


def test_a_py_dataset_raising_mid_epoch_is_one_line_naming_the_index(tmp_path: Path):
    with pytest.raises(ConfigError) as refused:
        kdist.fit(_functional_three_classes(), _BreaksAtFour(), run_dir=tmp_path / "r", verbose=0)
    line = str(refused.value)
    # The index and the user's exception, once, without TensorFlow's wrapping.
    assert line == "x: _BreaksAtFour[4] raised KeyError: 'no row 4'; fix its __getitem__"
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_a_generator_raising_mid_epoch_is_one_line_naming_x(tmp_path: Path):
    def batches():
        rng = np.random.default_rng(0)
        for step in range(6):
            if step == 3:
                raise OSError("the disk went away")
            yield rng.random((8, 4), dtype=np.float32), rng.integers(0, 3, 8)

    with pytest.raises(ConfigError) as refused:
        kdist.fit(
            _functional_three_classes(),
            batches(),
            steps_per_epoch=6,
            run_dir=tmp_path / "r",
            verbose=0,
        )
    assert str(refused.value) == (
        "x: the generator raised OSError at batch 3: the disk went away; fix the generator"
    )


# --- x of strings, or of complex numbers, for a model that takes real numbers ---------------


@pytest.mark.parametrize("make", [_three_classes, _functional_three_classes])
def test_strings_for_a_model_of_numbers_are_one_line_naming_x(tmp_path: Path, make):
    _, y = _arrays(0)
    x = np.array([["a", "b", "c", "d"]] * 32)
    with pytest.raises(ConfigError) as refused:
        kdist.fit(make(), x, y, run_dir=tmp_path / "r", verbose=0)
    line = str(refused.value)
    assert line.startswith("x: holds strings, but ") and "takes float32; give numbers" in line, line
    assert "\n" not in line


def test_strings_for_a_model_that_takes_strings_still_train(tmp_path: Path):
    inputs = keras.Input((1,), dtype="string")
    lookup = keras.layers.StringLookup(vocabulary=["a", "b", "c"], output_mode="one_hot")
    model = keras.Model(inputs, keras.layers.Dense(3)(lookup(inputs)))
    x = np.array([["a"], ["b"], ["c"], ["a"]] * 8)
    history = kdist.fit(model, x, np.tile([0, 1, 2, 0], 8), run_dir=tmp_path / "r", verbose=0)
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize("make", [_three_classes, _functional_three_classes])
def test_complex_x_is_refused_not_trained_on_its_real_part(tmp_path: Path, make):
    x, y = _arrays(0)
    with pytest.raises(ConfigError) as refused:
        kdist.fit(make(), x + 1j * x, y, run_dir=tmp_path / "r", verbose=0)
    line = str(refused.value)
    assert re.match(r"x: holds complex numbers \(complex\d+\), which \w+ would train", line), line
    assert "\n" not in line


def test_a_complex_dataset_is_refused_too(tmp_path: Path):
    import tensorflow as tf

    x, y = _arrays(0)
    data = tf.data.Dataset.from_tensor_slices((x.astype(np.complex64), y)).batch(8)
    with pytest.raises(ConfigError, match=r"^x: holds complex numbers \(complex64\)"):
        kdist.fit(_functional_three_classes(), data, run_dir=tmp_path / "r", verbose=0)
