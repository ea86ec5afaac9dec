"""No drawing depends on the clock: matplotlib's slow-legend warning never fires. Cost: ~3 s.

matplotlib times its search for the `loc="best"` legend place and warns when it takes
more than a second; under `filterwarnings = error` a loaded machine turned that warning
into a failed test (issue 43). The tests below make matplotlib's clock run 10 s per
reading, so any legend left at `loc="best"` warns here, on any machine.
"""

from __future__ import annotations

import csv
import itertools
import warnings
from pathlib import Path

import matplotlib.legend
import pytest

from kdist.callbacks.curves import Curves
from kdist.runs import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class _SlowClock:
    """Stands for the `time` module inside `matplotlib.legend`: 10 s pass per reading."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def perf_counter(self) -> float:
        return 10.0 * next(self._ticks)


@pytest.fixture
def slow_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matplotlib.legend, "time", _SlowClock())


def _records(epochs: int) -> list[dict[str, float]]:
    return [
        {"epoch": float(e), "loss": 1.0 / (e + 1), "val_loss": 1.2 / (e + 1)} for e in range(epochs)
    ]


def test_the_slow_clock_makes_a_best_placed_legend_warn(slow_clock: None, tmp_path: Path):
    # The fake clock works: a legend left at matplotlib's default place warns.
    figure = plots.history_figure(_records(3))
    for ax in figure.axes:
        ax.legend()  # loc="best", matplotlib's default
    with pytest.warns(UserWarning, match="can be slow"):
        plots.write_figure(figure, tmp_path / "best.png")


def test_curves_png_is_drawn_without_a_timing_warning(slow_clock: None, tmp_path: Path):
    callback = Curves(path=tmp_path / "curves.png", min_interval=0.0, draw_at_end=False)
    callback.on_train_begin()
    for epoch in range(40):  # more than 30 epochs: lines without markers
        callback.on_epoch_end(epoch, {"loss": 1.0 / (epoch + 1), "val_loss": 1.1 / (epoch + 1)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = callback.write()
    assert path is not None and path.read_bytes().startswith(PNG_MAGIC)


def test_sweep_png_is_drawn_without_a_timing_warning(slow_clock: None, tmp_path: Path):
    table = tmp_path / "summary.csv"
    with table.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["job", "optimizer.learning_rate", "loss"])
        writer.writeheader()
        for job, rate in enumerate([1e-3, 3e-3, 1e-2]):
            writer.writerow({"job": job, "optimizer.learning_rate": rate, "loss": 1.0 - rate})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = plots.write_sweep(table)
    assert path.read_bytes().startswith(PNG_MAGIC)
