"""The sweep plot's axes: a log axis where the values were sampled on a log scale or span
two decades, tick labels that do not overlap, every label inside the figure. Read on the
figure object (no image compared). Cost: ~2 s."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from kdist.runs import plots
from kdist.runs.fileio import write_csv_atomic
from kdist.runs.sweep import sweep_log_keys


def _rows(key: str, values: list, objective=lambda i: 0.5 + 0.05 * i) -> list[dict]:
    return [
        {
            "job": i,
            "status": "COMPLETED",
            key: value,
            "objective": objective(i),
            "objective_name": "val_accuracy",
            "objective_direction": "max",
            "overrides": f"{key}={value}",
        }
        for i, value in enumerate(values)
    ]


def _labels_fit(figure) -> None:
    """No two visible x tick labels overlap; every text drawn lies inside the figure."""
    figure.draw_without_rendering()
    box = figure.bbox
    for ax in figure.axes:
        low, high = sorted(ax.get_xlim())
        # The labels drawn: visible, with text, at a tick inside the axis's range.
        ticks = [
            text
            for text, loc in zip(ax.get_xticklabels(), ax.get_xticks(), strict=False)
            if text.get_visible() and text.get_text() and low <= loc <= high
        ]
        shown = sorted((t.get_window_extent() for t in ticks), key=lambda b: b.x0)
        for left, right in itertools.pairwise(shown):
            assert left.x1 <= right.x0, (left, right)
        texts = [*ticks, ax.xaxis.label, ax.yaxis.label, ax.title, *ax.texts]
        for text in texts:
            if not (text.get_visible() and text.get_text()):
                continue
            extent = text.get_window_extent()
            assert extent.x0 >= box.x0 - 1 and extent.x1 <= box.x1 + 1, text.get_text()
            assert extent.y0 >= box.y0 - 1 and extent.y1 <= box.y1 + 1, text.get_text()


@pytest.mark.parametrize(
    ("values", "scale"),
    [
        ([1e-4, 1e-3, 1e-2], "log"),  # two decades
        ([1e-3, 2e-3, 4e-3, 8e-3], "log"),  # one ratio between neighbours
        ([0.1, 0.2, 0.3, 0.4], "linear"),  # one step between neighbours
        ([1e-3, 3e-3], "linear"),  # two values, half a decade: nothing says log
        ([-1.0, 1.0, 100.0], "linear"),  # a log axis cannot show a value <= 0
    ],
)
def test_the_axis_scale_follows_the_values(values, scale):
    (ax,) = plots.sweep_figure(_rows("optimizer.learning_rate", values)).axes
    assert ax.get_xscale() == scale


def test_a_key_the_sweeper_samples_on_a_log_scale_gets_a_log_axis(tmp_path: Path):
    """Optuna's `tag(log, interval(...))` in the sweep's multirun.yaml, read by the summary."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    params = {
        "optimizer.learning_rate": "tag(log, interval(1e-4, 1e-2))",
        "model": "choice(mlp, cnn)",
    }
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"sweeper": {"params": params}}}))
    assert sweep_log_keys(sweep) == ["optimizer.learning_rate"]
    rows = _rows("optimizer.learning_rate", [1e-3, 3e-3])
    write_csv_atomic(sweep / "summary.csv", rows, list(rows[0]))
    (ax,) = plots.sweep_figure(sweep / "summary.csv", log_keys=["optimizer.learning_rate"]).axes
    assert ax.get_xscale() == "log"


@pytest.mark.parametrize(
    ("key", "values"),
    [
        ("model", [f"a_long_model_name_number_{i}" for i in range(8)]),
        ("trainer.global_batch_size", [1000000 + 7 * i for i in range(12)]),
        ("optimizer.learning_rate", [1e-5 * 3**i for i in range(9)]),
    ],
    ids=["long-categories", "crowded-numbers", "log"],
)
def test_tick_labels_do_not_overlap_and_labels_stay_inside(key, values):
    # The best job last: its note sits at the right edge, where it would leave the figure.
    figure = plots.sweep_figure(_rows(key, values))
    _labels_fit(figure)


def test_two_panels_fit_as_well():
    rows = _rows("model", [f"model_with_a_long_name_{i}" for i in range(6)])
    for i, row in enumerate(rows):
        row["optimizer.learning_rate"] = 1e-4 * 10 ** (i % 3)
        row["overrides"] += f" optimizer.learning_rate={row['optimizer.learning_rate']}"
    figure = plots.sweep_figure(rows)
    assert [ax.get_xscale() for ax in figure.axes if ax.get_visible()] == ["linear", "log"]
    _labels_fit(figure)
