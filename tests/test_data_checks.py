"""Data that would train wrong or fail late is refused before the first step (issue 13, item 7).

Cost: about 10 s (small arrays and images; one `python -m kdist.train` that stops before
training).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import LOGICAL, learnable_arrays, run_module, write_class_images

import kdist
from kdist.config.errors import ConfigError
from kdist.data.checks import check_label_range


def _npz(tmp_path: Path, **arrays) -> str:
    path = tmp_path / "d.npz"
    np.savez(path, **arrays)
    return str(path)


def test_label_range_names_the_bad_labels_and_the_valid_range():
    check_label_range("data.source.path", np.array([0, 1, 2]), 3)
    with pytest.raises(ConfigError) as raised:
        check_label_range("data.source.path", np.array([0, 3, -1, 7, 1]), 3)
    assert str(raised.value) == (
        "data.source.path: has 3 label(s) outside [0, 3): -1, 3, 7; class ids must be 0..2 "
        "(or set data.source.num_classes)"
    )


def test_npz_labels_outside_num_classes(tmp_path: Path):
    x, y = learnable_arrays(100)
    y[5] = 9
    with pytest.raises(ConfigError, match=r"^data\.source\.path: has 1 label\(s\) outside"):
        kdist.data.npz(path=_npz(tmp_path, x=x, y=y), num_classes=3)
    y[5] = -1
    with pytest.raises(ConfigError, match=r"outside \[0, 3\): -1"):
        kdist.data.npz(path=_npz(tmp_path, x=x, y=y), num_classes=3)


def test_npz_lengths_strings_and_non_finite(tmp_path: Path):
    x, y = learnable_arrays(100)
    with pytest.raises(ConfigError, match=r"has 100 feature rows but 90 labels \('x' and 'y'\)"):
        kdist.data.npz(path=_npz(tmp_path, x=x, y=y[:90]))
    # Text features are data for a model's own StringLookup or TextVectorization.
    text = kdist.data.npz(path=_npz(tmp_path, x=x.astype(str), y=y))
    assert text.dataset("train").element_spec[0].dtype == "string"
    with pytest.raises(ConfigError, match=r"labels 'y' are <U\d+ \('U' kind\), not numbers"):
        kdist.data.npz(path=_npz(tmp_path, x=x, y=y.astype(str)))
    x[7, 2] = np.nan
    x[9, 0] = np.inf
    with pytest.raises(ConfigError) as raised:
        kdist.data.npz(path=_npz(tmp_path, x=x, y=y))
    assert str(raised.value).startswith(
        "data.source.path: features 'x' hold 2 NaN or infinite value(s), the first at "
        "example 7, (2,) (nan)"
    )
    x[7, 2] = x[9, 0] = 0.0
    np.savez(tmp_path / "v.npz", x=x[:10], y=y[:11])
    with pytest.raises(ConfigError, match=r"^data\.source\.validation_path: has 10 feature"):
        kdist.data.npz(path=_npz(tmp_path, x=x, y=y), validation_path=str(tmp_path / "v.npz"))


def test_image_dir_empty_class_folder(tmp_path: Path):
    write_class_images(tmp_path / "images", per_class=3)
    (tmp_path / "images" / "class_9").mkdir()
    with pytest.raises(ConfigError) as raised:
        kdist.data.image_dir(path=str(tmp_path / "images"))
    assert "has class folder(s) without images: class_9;" in str(raised.value)


def test_image_dir_corrupt_jpeg_is_named(tmp_path: Path):
    import tensorflow as tf

    write_class_images(tmp_path / "images", per_class=5)
    image = tf.cast(tf.fill((8, 8, 3), 128), tf.uint8)
    good = tf.io.encode_jpeg(image).numpy()
    bad = tmp_path / "images" / "class_1" / "broken.jpg"
    bad.write_bytes(good[: len(good) // 2])  # cut in the middle of the scan data
    with pytest.raises(ConfigError) as raised:
        kdist.data.image_dir(path=str(tmp_path / "images"))
    assert str(raised.value).startswith(
        f"data.source.path: holds an image that does not decode: {bad} ("
    )
    source = kdist.data.image_dir(path=str(tmp_path / "images"), verify_images=False)
    assert source.size("train") + source.size("validation") == 16


def test_train_with_bad_labels_exits_2_before_training(tmp_path: Path):
    x, y = learnable_arrays(200)
    y[0] = 5
    path = _npz(tmp_path, x=x, y=y)
    result = run_module(
        "kdist.train",
        [LOGICAL, "data=npz", f"data.source.path={path}", "data.source.num_classes=3"],
        cwd=tmp_path,
        timeout=180,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("kdist:")]
    assert errors == [
        "kdist: config error: data.source.path: has 1 label(s) outside [0, 3): 5; "
        "class ids must be 0..2 (or set data.source.num_classes)"
    ]
    assert "Traceback" not in result.stderr and "Epoch" not in result.stdout
