"""Each data source reads small generated files and trains one epoch to a sane accuracy.

Cost: about 25 s (one short training per source; TFDS import and build about 5 s).
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    build_tiny_tfds,
    compose,
    learnable_arrays,
    option_overrides,
    write_class_images,
    write_csv,
    write_fake_mnist,
)

import kdist
from kdist.config.errors import ConfigError

FAST_TRAINING = [
    "trainer.epochs=1",
    "trainer.verbose=0",
    "trainer.global_batch_size=32",
    "trainer.steps_per_execution=4",
    "callbacks=minimal",
    "optimizer.learning_rate=0.01",
]


def _train(overrides: list[str], tmp_path: Path) -> kdist.Experiment:
    cfg = compose([*overrides, *FAST_TRAINING, f"run_dir={tmp_path / 'run'}"])
    exp = kdist.Experiment(cfg)
    exp.fit()
    return exp


def _accuracy(exp: kdist.Experiment) -> float:
    return exp.metrics()["validation"]["accuracy"]


# --- npz --------------------------------------------------------------------------------


def test_npz_trains_with_a_held_out_fraction(tmp_path: Path):
    x, y = learnable_arrays(1200)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    exp = _train(["data=npz", f"data.source.path={tmp_path / 'train.npz'}"], tmp_path)
    assert exp.source.size("train") == 960 and exp.source.size("validation") == 240
    assert exp.source.input_shape == (8,) and exp.source.num_classes == 3
    assert _accuracy(exp) > 0.85


def test_npz_validation_arrays_and_uint8_scaling(tmp_path: Path):
    x = np.arange(40 * 4, dtype=np.uint8).reshape(40, 4)
    y = np.arange(40) % 2
    np.savez(tmp_path / "d.npz", a=x, b=y, va=x[:10], vb=y[:10])
    source = kdist.data.npz(
        path=str(tmp_path / "d.npz"),
        x_key="a",
        y_key="b",
        validation_x_key="va",
        validation_y_key="vb",
    )
    features, labels = source.arrays("train")
    assert source.size("validation") == 10 and len(labels) == 40
    assert features.dtype == np.float32 and features.max() == pytest.approx(159 / 255)


def test_npz_errors_name_the_key(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"data\.source\.path.*no such file"):
        kdist.data.npz(path=str(tmp_path / "absent.npz"))
    np.savez(tmp_path / "d.npz", x=np.zeros((4, 2)), y=np.zeros(4, np.int64))
    with pytest.raises(ConfigError, match=r"has no array 'labels'.*arrays in it: x, y"):
        kdist.data.npz(path=str(tmp_path / "d.npz"), y_key="labels")
    # Object arrays would need pickle: refused.
    np.savez(tmp_path / "o.npz", x=np.array([{"a": 1}] * 4, dtype=object), y=np.zeros(4))
    with pytest.raises(ConfigError, match="cannot be read"):
        kdist.data.npz(path=str(tmp_path / "o.npz"))


# --- image_dir --------------------------------------------------------------------------


def test_image_dir_trains_with_augmentation(tmp_path: Path):
    write_class_images(tmp_path / "images", per_class=80)
    exp = _train(
        [
            "data=image_dir",
            f"data.source.path={tmp_path / 'images'}",
            "data.augment.random_flip=horizontal",
            "data.augment.random_crop_padding=1",
        ],
        tmp_path,
    )
    assert exp.source.input_shape == (8, 8, 3)
    assert exp.source.class_names == ["class_0", "class_1", "class_2"]
    assert exp.source.size("train") == 192 and exp.source.size("validation") == 48
    assert _accuracy(exp) > 0.8


def test_image_dir_resizes_and_checks_folders(tmp_path: Path):
    write_class_images(tmp_path / "train", per_class=3, size=10)
    write_class_images(tmp_path / "val", per_class=2, size=10, classes=2)
    source = kdist.data.image_dir(path=str(tmp_path / "train"), image_size=[4, 6], channels=1)
    image, _ = next(iter(source.dataset("train")))
    assert image.shape == (4, 6, 1) and image.dtype == tf.float32
    assert float(tf.reduce_min(image)) >= 0.0 and float(tf.reduce_max(image)) <= 1.0
    with pytest.raises(ConfigError, match=r"validation_path.*not the training ones"):
        kdist.data.image_dir(path=str(tmp_path / "train"), validation_path=str(tmp_path / "val"))
    with pytest.raises(ConfigError, match=r"data\.source\.path.*no such folder"):
        kdist.data.image_dir(path=str(tmp_path / "absent"))


# --- csv --------------------------------------------------------------------------------


def test_csv_trains_from_several_files_with_text_labels(tmp_path: Path):
    x, y = learnable_arrays(1200)
    names = ["setosa", "versicolor", "virginica"]
    for i in range(3):
        part = slice(i * 400, (i + 1) * 400)
        write_csv(tmp_path / f"part-{i}.csv", x[part], y[part], label_names=names)
    exp = _train(["data=csv", f"data.source.path={tmp_path / 'part-*.csv'}"], tmp_path)
    source = exp.source
    assert source.class_names == names and source.input_shape == (8,)
    assert len(source.files) == 3
    # The hash split is fixed and the sizes match what is read.
    assert source.size("train") + source.size("validation") == 1200
    assert 180 < source.size("validation") < 300
    read = sum(1 for _ in source.dataset("validation"))
    assert read == source.size("validation")
    assert _accuracy(exp) > 0.85


def test_csv_validation_file_and_bad_rows(tmp_path: Path):
    x, y = learnable_arrays(30)
    write_csv(tmp_path / "train.csv", x[:20], y[:20])
    write_csv(tmp_path / "val.csv", x[20:], y[20:])
    source = kdist.data.csv(
        path=str(tmp_path / "train.csv"),
        validation_path=str(tmp_path / "val.csv"),
        feature_columns=["f2", "f0"],
    )
    assert source.size("train") == 20 and source.size("validation") == 10
    features, label = next(iter(source.dataset("train")))
    np.testing.assert_allclose(features.numpy(), [x[0, 2], x[0, 0]], rtol=1e-5)
    assert int(label) == int(y[0])
    bad = tmp_path / "bad.csv"
    bad.write_text("f0,label\n1.0,0\nabc,1\n")
    with pytest.raises(ConfigError, match=r"bad\.csv:3.*'f0' is not a number"):
        kdist.data.csv(path=str(bad))
    with pytest.raises(ConfigError, match=r"label_column.*columns: f0, label"):
        kdist.data.csv(path=str(bad), label_column="class")
    with pytest.raises(ConfigError, match="matches no file"):
        kdist.data.csv(path=str(tmp_path / "none-*.csv"))


# --- keras (local cache) ----------------------------------------------------------------


def test_keras_mnist_from_the_cache_trains(tmp_path: Path):
    write_fake_mnist(tmp_path / "cache")
    exp = _train(
        ["data=keras", "data.source.name=mnist", f"data.source.cache_dir={tmp_path / 'cache'}"],
        tmp_path,
    )
    assert exp.source.input_shape == (28, 28, 1) and exp.source.num_classes == 10
    assert exp.source.size("train") == 600 and exp.source.size("validation") == 120
    assert _accuracy(exp) > 0.6


def test_keras_missing_file_names_key_and_expected_path(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / "datasets" / "mnist.npz"
    with pytest.raises(ConfigError) as caught:
        kdist.data.keras_dataset(name="mnist")
    message = str(caught.value)
    assert "data.source.cache_dir" in message and str(expected) in message
    assert "does not download" in message
    assert not expected.parent.exists()  # nothing was fetched or created
    with pytest.raises(ConfigError, match=r"data\.source\.name.*mnist, fashion_mnist"):
        kdist.data.keras_dataset(name="imagenet")


def test_keras_fashion_and_cifar_layouts(tmp_path: Path):
    cache = tmp_path / "cache"
    fashion = cache / "fashion-mnist"
    fashion.mkdir(parents=True)
    for prefix, count in (("train", 6), ("t10k", 4)):
        labels = bytes(8) + bytes(range(count))
        images = bytes(16) + bytes(count * 28 * 28)
        (fashion / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(labels))
        (fashion / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(images))
    source = kdist.data.keras_dataset(name="fashion_mnist", cache_dir=str(cache))
    assert source.input_shape == (28, 28, 1) and source.size("validation") == 4

    # Keras 3 layout for CIFAR: <cache>/cifar-10-batches-py-target/cifar-10-batches-py/.
    folder = cache / "cifar-10-batches-py-target" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    pixels = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        batch = {b"data": pixels, b"labels": [1, 7]}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=4))
    cifar = kdist.data.keras_dataset(name="cifar10", cache_dir=str(cache))
    x, y = cifar.arrays("train")
    assert x.shape == (10, 32, 32, 3) and list(y[:2]) == [1, 7]
    # Channels last: pixel (0, 0) takes its R, G, B from the three 1024-value planes.
    np.testing.assert_allclose(x[0, 0, 0] * 255, pixels[0, [0, 1024, 2048]], atol=1e-3)

    # A pickle that would run code is refused.
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (folder / "test_batch").write_bytes(pickle.dumps({b"data": Evil()}))
    with pytest.raises(ConfigError, match=r"refusing to load builtins\.print"):
        kdist.data.keras_dataset(name="cifar10", cache_dir=str(cache))


# --- tfds -------------------------------------------------------------------------------


def test_tfds_prepared_locally_trains(tmp_path: Path):
    pytest.importorskip("tensorflow_datasets")
    name = build_tiny_tfds(tmp_path / "tfds", train=960, test=240)
    exp = _train(
        ["data=tfds", f"data.source.name={name}", f"data.source.data_dir={tmp_path / 'tfds'}"],
        tmp_path,
    )
    assert exp.source.input_shape == (8,) and exp.source.num_classes == 3
    assert exp.source.size("train") == 960 and exp.source.size("validation") == 240
    assert _accuracy(exp) > 0.85
    with pytest.raises(ConfigError, match=r"data\.source\.label_key.*features: .*image"):
        kdist.data.tfds(name=name, data_dir=str(tmp_path / "tfds"), label_key="y")
    with pytest.raises(ConfigError, match=r"data\.source\.name"):
        kdist.data.tfds(name="no_such_dataset_kdist", data_dir=str(tmp_path / "tfds"))


# --- the pipeline's errors and fallbacks -----------------------------------------------


def test_training_split_smaller_than_one_global_batch(tmp_path: Path):
    x, y = learnable_arrays(20)
    np.savez(tmp_path / "small.npz", x=x, y=y)
    base = ["data=npz", f"data.source.path={tmp_path / 'small.npz'}", "trainer.verbose=0"]
    cfg = compose([*base, "trainer.global_batch_size=32", f"run_dir={tmp_path}"])
    exp = kdist.Experiment(cfg)  # the config's data is read at the call that uses it
    with pytest.raises(ConfigError, match=r"global_batch_size=32.*larger than the 16 training"):
        exp.fit()
    # With a fixed number of steps the data repeats: a documented fallback.
    cfg = compose(
        [
            *base,
            "trainer.global_batch_size=32",
            "trainer.steps_per_epoch=3",
            "trainer.epochs=1",
            "callbacks=minimal",
            "strategy=mirrored",
            f"run_dir={tmp_path}",
        ]
    )
    exp = kdist.Experiment(cfg)
    exp.fit()
    assert int(exp.optimizer.iterations.numpy()) == 3
    # Validation (4 examples, fewer than a global batch) still covers every example.
    assert exp.metrics()["validation"]["accuracy"] * 4 == pytest.approx(
        round(exp.metrics()["validation"]["accuracy"] * 4)
    )


def test_dataset_fn_rejects_an_indivisible_global_batch(tmp_path: Path):
    from kdist.data import make_dataset_fn

    cfg = compose(["data=synthetic", "data.source.input_shape=[4]", "data.source.num_train=64"])
    source = kdist.data.synthetic(input_shape=[4], num_train=64)
    fn = make_dataset_fn(source, "train", cfg.data, global_batch_size=9, seed=0)
    context = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2
    )
    with pytest.raises(ConfigError, match=r"trainer\.global_batch_size=9.*2 replicas.*e\.g\. 8"):
        fn(context)


def test_augmentation_needs_images(tmp_path: Path):
    cfg = compose(
        [
            "data=synthetic",
            "data.source.input_shape=[16]",
            "data.augment.random_flip=horizontal",
            f"run_dir={tmp_path}",
        ]
    )
    with pytest.raises(ConfigError, match=r"data\.augment\.random_flip.*needs images"):
        kdist.Experiment(cfg).build_model()
    cfg = compose(["data.augment.random_flip=sideways", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"data\.augment\.random_flip='sideways'"):
        kdist.Experiment(cfg)


def test_augmentation_flips_and_crops_deterministically():
    from omegaconf import OmegaConf

    from kdist.data.augment import augment

    image = tf.reshape(tf.range(16, dtype=tf.float32), (4, 4, 1))
    ds = tf.data.Dataset.from_tensors((image, 0)).repeat(64)
    cfg = OmegaConf.create({"random_flip": "horizontal", "random_crop_padding": 1})
    first = [x.numpy() for x, _ in augment(ds, cfg, input_shape=(4, 4, 1), seed=3)]
    again = [x.numpy() for x, _ in augment(ds, cfg, input_shape=(4, 4, 1), seed=3)]
    np.testing.assert_array_equal(np.stack(first), np.stack(again))
    distinct = {x.tobytes() for x in first}
    assert len(distinct) > 4  # flips and shifts vary per example
    assert all(x.shape == (4, 4, 1) for x in first)
    # A resumed stream continues where the first one was.
    resumed = [
        x.numpy() for x, _ in augment(ds.skip(10), cfg, input_shape=(4, 4, 1), seed=3, skip=10)
    ]
    np.testing.assert_array_equal(np.stack(resumed), np.stack(first[10:]))


def test_option_overrides_helper_covers_every_new_data_option(tmp_path: Path):
    """The files `tests/helpers.option_overrides` writes are enough for each option to build."""
    for option in ("npz", "tfrecord", "image_dir", "csv", "keras"):
        root = tmp_path / option
        root.mkdir()
        cfg = compose([f"data={option}", *option_overrides("data", option, root)])
        source = kdist.Experiment(cfg, run_dir=root / "run").source
        assert source.size("train") > 0, option
