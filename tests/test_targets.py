"""Data carries what Keras data carries: float, one-hot and dict targets, sample weights."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from helpers import compose

import kdist
from kdist.config import ConfigError
from kdist.data.csv_source import csv as csv_source


def _write(path: Path, header: list[str], rows: np.ndarray) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows.tolist())
    return path


def _regression_csv(path: Path, count: int = 160) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(count, 4))
    price = x @ np.array([1.0, -2.0, 0.5, 0.0]) + 3.0
    rooms = x[:, :1].sum(axis=1) * 0.5
    weight = rng.uniform(0.5, 2.0, size=count)
    return _write(
        path,
        ["a", "b", "c", "d", "price", "rooms", "w"],
        np.column_stack([x, price, rooms, weight]),
    )


def test_csv_float_target_and_weight_column(tmp_path: Path):
    path = _regression_csv(tmp_path / "house.csv")
    source = csv_source(
        path=str(path),
        label_column="price",
        feature_columns=["a", "b", "c", "d"],
        targets="value",
        weight_column="w",
    )
    x, y, w = next(iter(source.dataset("train")))
    assert x.shape == (4,) and y.shape == (1,) and y.dtype == tf.float32
    assert w.shape == () and 0.5 <= float(w) <= 2.0


def test_csv_several_target_columns_give_a_dict(tmp_path: Path):
    path = _regression_csv(tmp_path / "house.csv")
    source = csv_source(
        path=str(path),
        label_column=["price", "rooms"],
        feature_columns=["a", "b", "c", "d"],
        targets="value",
    )
    _x, y = next(iter(source.dataset("train")))
    assert set(y) == {"price", "rooms"} and y["price"].shape == (1,)


def test_csv_several_class_columns_are_refused(tmp_path: Path):
    path = _regression_csv(tmp_path / "house.csv")
    with pytest.raises(ConfigError, match=r"label_column.*float targets.*targets=value"):
        csv_source(path=str(path), label_column=["price", "rooms"])


def test_csv_regression_trains_with_mse(tmp_path: Path):
    path = _regression_csv(tmp_path / "house.csv")
    exp = kdist.Experiment(
        compose(
            [
                "data=csv",
                f"data.source.path={path}",
                "data.source.label_column=price",
                "data.source.feature_columns=[a,b,c,d]",
                "data.source.targets=value",
                "data.source.weight_column=w",
                "model=custom",
                "model._target_=kdist.models.examples.regression_mlp",
                "trainer.loss=mse",
                "trainer.metrics=[mae]",
                "trainer.epochs=3",
                "trainer.global_batch_size=16",
                "trainer.verbose=0",
                "callbacks=minimal",
                "optimizer.learning_rate=0.01",
                f"run_dir={tmp_path / 'run'}",
            ]
        )
    )
    history = exp.fit()
    assert history.history["val_mae"][-1] < history.history["val_mae"][0]
    assert exp.cfg.objective.name == "val_loss"


def test_synthetic_targets(tmp_path: Path):
    from kdist.data import synthetic

    both = synthetic(num_train=32, num_validation=8, input_shape=(4,), targets="both")
    _x, y = next(iter(both.dataset("train")))
    assert set(y) == {"class", "value"} and y["value"].dtype == tf.float32
    value = synthetic(num_train=32, num_validation=8, input_shape=(4,), targets="value")
    assert value.arrays("train")[1].shape == (32, 1)


def test_recipes_for_own_models_train(tmp_path: Path):
    from helpers import REPO

    for name, logged in (
        ("regression", {"loss", "mae", "val_loss", "val_mae"}),
        ("multi_output", {"class_accuracy", "value_mae", "val_class_accuracy"}),
        ("custom_train_step", {"grad_norm", "accuracy", "val_accuracy"}),
    ):
        cfg = compose(
            [
                f"run_dir={tmp_path / name}",
                "trainer.epochs=2",
                "trainer.steps_per_epoch=3",
                "trainer.verbose=0",
                "callbacks=minimal",
            ],
            config_name=name,
            config_dir=REPO / "recipes",
        )
        exp = kdist.Experiment(cfg)
        history = exp.fit()
        assert logged <= set(history.history), (name, sorted(history.history))


def test_one_hot_targets_with_categorical_crossentropy(tmp_path: Path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(96, 6)).astype("float32")
    labels = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0).astype(int)
    np.savez(tmp_path / "d.npz", x=x, y=np.eye(3, dtype="float32")[labels])
    exp = kdist.Experiment(
        compose(
            [
                "data=npz",
                f"data.source.path={tmp_path / 'd.npz'}",
                "model=mlp",
                "trainer.loss={_target_: keras.losses.CategoricalCrossentropy, from_logits: true}",
                "trainer.metrics=[accuracy]",
                "trainer.epochs=2",
                "trainer.global_batch_size=16",
                "trainer.verbose=0",
                "callbacks=minimal",
                f"run_dir={tmp_path / 'run'}",
            ]
        )
    )
    assert exp.source.num_classes == 3
    history = exp.fit()
    assert "val_accuracy" in history.history


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainer.loss=mse", "mse"),
        (
            "trainer.loss={_target_: keras.losses.MeanSquaredError}",
            {"_target_": "keras.losses.MeanSquaredError"},
        ),
        ("trainer.loss={cls: mse, aux: mae}", {"cls": "mse", "aux": "mae"}),
    ],
)
def test_a_loss_override_replaces_the_default_wholesale(override, expected):
    from omegaconf import OmegaConf

    from kdist.config.validate import validate

    cfg = compose([override])
    validate(cfg)
    loss = cfg.trainer.loss
    assert (OmegaConf.to_container(loss) if not isinstance(loss, str) else loss) == expected


def test_metrics_typo_is_a_config_error_naming_the_key(tmp_path: Path):
    exp = kdist.Experiment(
        compose(["trainer=fast_dev", "trainer.metrics=[accuracy, maee]", f"run_dir={tmp_path}"])
    )
    with pytest.raises(ConfigError, match=r"trainer\.metrics\[1\]='maee': is not a Keras metric"):
        exp.build_model()


def _regression_tfrecords(folder: Path, count: int = 96) -> Path:
    from kdist.data.tfrecords import write_manifest

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2)
    for split, n in (("train", count), ("validation", count // 4)):
        with tf.io.TFRecordWriter(str(folder / f"{split}.tfrecord")) as writer:
            for _ in range(n):
                x = rng.normal(size=4).astype("float32")
                feature = {
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
                    "price": tf.train.Feature(
                        float_list=tf.train.FloatList(value=[float(x @ [1, -2, 0.5, 0])])
                    ),
                    "rooms": tf.train.Feature(
                        float_list=tf.train.FloatList(value=[float(x[0]), float(x[1])])
                    ),
                    "w": tf.train.Feature(float_list=tf.train.FloatList(value=[2.0])),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(x[0] > 0)])),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    write_manifest(
        folder,
        {"train": "train.tfrecord", "validation": "validation.tfrecord"},
        features={
            "x": {"shape": [4], "dtype": "float32", "encoding": "list"},
            "price": {"shape": [], "dtype": "float32", "encoding": "list"},
            "rooms": {"shape": [2], "dtype": "float32", "encoding": "list"},
            "w": {"shape": [], "dtype": "float32", "encoding": "list"},
            "y": {"shape": [], "dtype": "int64", "encoding": "list"},
        },
        feature_key="x",
        label_key="y",
        num_classes=2,
    )
    return folder


def test_tfrecord_target_keys_and_weight_key(tmp_path: Path):
    from kdist.data import tfrecord

    folder = _regression_tfrecords(tmp_path / "records")
    default = tfrecord(path=str(folder))
    x, y = next(iter(default.dataset("train")))
    assert y.dtype == tf.int32 and default.num_classes == 2
    source = tfrecord(path=str(folder), label_key="price", weight_key="w")
    x, y, w = next(iter(source.dataset("train")))
    assert x.shape == (4,) and y.dtype == tf.float32 and float(w) == 2.0
    several = tfrecord(path=str(folder), label_key=["price", "rooms"])
    assert several.reads_whole(several.files)  # records of one length: read whole
    _, targets = next(iter(several.dataset("validation")))
    assert set(targets) == {"price", "rooms"} and targets["rooms"].shape == (2,)
    with pytest.raises(ConfigError, match=r"data\.source\.label_key='nope'.*numeric features"):
        tfrecord(path=str(folder), label_key="nope")
    with pytest.raises(ConfigError, match=r"data\.source\.weight_key='nope'"):
        tfrecord(path=str(folder), weight_key="nope")


def test_tfrecord_regression_trains(tmp_path: Path):
    folder = _regression_tfrecords(tmp_path / "records")
    exp = kdist.Experiment(
        compose(
            [
                "data=tfrecord",
                f"data.source.path={folder}",
                "data.source.label_key=price",
                "data.source.weight_key=w",
                "model=custom",
                "model._target_=kdist.models.examples.regression_mlp",
                "trainer.loss=mse",
                "trainer.metrics=[mae]",
                "trainer.epochs=3",
                "trainer.global_batch_size=16",
                "trainer.verbose=0",
                "callbacks=minimal",
                "optimizer.learning_rate=0.01",
                f"run_dir={tmp_path / 'run'}",
            ]
        )
    )
    history = exp.fit()
    assert history.history["val_mae"][-1] < history.history["val_mae"][0]
