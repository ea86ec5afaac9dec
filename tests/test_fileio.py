"""kdist.runs.fileio: atomic writes and CSV reading (no TensorFlow; fast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdist.runs.fileio import (
    atomic_directory,
    atomic_path,
    read_csv,
    read_csv_numbers,
    write_csv_atomic,
    write_text_atomic,
)


def test_atomic_path_moves_the_file_into_place_and_keeps_the_suffix(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "model.keras"
    with atomic_path(target) as partial:
        assert partial.suffix == ".keras"
        assert partial.parent == target.parent
        partial.write_text("new")
        assert not target.exists()
    assert target.read_text() == "new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.keras"]


def test_atomic_path_leaves_the_old_file_when_the_block_raises(tmp_path: Path) -> None:
    target = tmp_path / "curves.png"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as partial:
        partial.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]


def test_write_text_atomic_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    write_text_atomic(target, "one")
    write_text_atomic(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
    assert target.stat().st_mode & 0o044, "readable by others like a normal new file"


def test_write_csv_atomic_round_trips_through_read_csv(tmp_path: Path) -> None:
    path = tmp_path / "summary.csv"
    rows = [{"job": 0, "loss": 0.5, "extra": "dropped"}, {"job": 1, "loss": None}]
    write_csv_atomic(path, rows, ["job", "loss"])
    assert read_csv(path) == [{"job": "0", "loss": "0.5"}, {"job": "1", "loss": ""}]
    assert read_csv_numbers(path) == [{"job": 0.0, "loss": 0.5}, {"job": 1.0}]


def test_read_csv_of_a_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_csv(tmp_path / "absent.csv")


def test_atomic_directory_swaps_a_full_folder(tmp_path: Path) -> None:
    target = tmp_path / "saved_model"
    target.mkdir()
    (target / "old.pb").write_text("old")
    with atomic_directory(target) as staging:
        staging.mkdir()
        (staging / "new.pb").write_text("new")
        assert (target / "old.pb").exists()
    assert [p.name for p in target.iterdir()] == ["new.pb"]
    assert [p.name for p in tmp_path.iterdir()] == ["saved_model"]


def test_atomic_directory_keeps_the_old_folder_when_the_block_raises(tmp_path: Path) -> None:
    target = tmp_path / "saved_model"
    target.mkdir()
    (target / "old.pb").write_text("old")
    with pytest.raises(RuntimeError), atomic_directory(target) as staging:
        staging.mkdir()
        raise RuntimeError("export failed")
    assert [p.name for p in target.iterdir()] == ["old.pb"]
    assert [p.name for p in tmp_path.iterdir()] == ["saved_model"]
