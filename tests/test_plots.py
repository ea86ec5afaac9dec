"""kdist.runs.plots (curves.png, sweep plots) and the Curves callback. Cost: ~5 s."""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from kdist.callbacks.curves import Curves, wait_for_writes
from kdist.runs import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class _History:
    """Duck-types keras.callbacks.History: `history` and `epoch`."""

    def __init__(self, history: dict, epoch: list[int]):
        self.history = history
        self.epoch = epoch


def _lines(figure: Figure, title: str) -> dict[str, tuple[list[float], list[float]]]:
    (ax,) = [a for a in figure.axes if a.get_title() == title]
    return {
        line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
        for line in ax.get_lines()
    }


def _write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_history_figure_has_a_panel_per_metric_with_train_and_validation():
    history = _History(
        {
            "accuracy": [0.5, 0.7, 0.8],
            "loss": [2.0, 1.0, 0.5],
            "val_accuracy": [0.6, 0.75, 0.85],
            "val_loss": [1.5, 0.9, 0.6],
        },
        epoch=[0, 1, 2],
    )
    figure = plots.history_figure(history, title="run")
    titles = [a.get_title() for a in figure.axes if a.get_visible()]
    assert titles == ["loss", "accuracy"]  # loss first, whatever the key order
    loss = _lines(figure, "loss")
    assert loss["train"] == ([1, 2, 3], [2.0, 1.0, 0.5])
    assert loss["validation"] == ([1, 2, 3], [1.5, 0.9, 0.6])
    assert figure.get_suptitle() == "run"


def test_curves_from_a_history_csv(tmp_path: Path):
    # CSVLogger's layout: 0-based epoch column, validation values in val_ columns.
    table = _write_csv(
        tmp_path / "history.csv",
        [
            {"epoch": 0, "accuracy": 0.5, "loss": 1.2, "val_accuracy": 0.6, "val_loss": 1.1},
            {"epoch": 1, "accuracy": 0.8, "loss": 0.6, "val_accuracy": 0.7, "val_loss": 0.9},
        ],
    )
    path = plots.write_curves(table, tmp_path / "out" / "curves.png")
    assert path.read_bytes().startswith(PNG_MAGIC)
    assert not list((tmp_path / "out").glob(".curves-*"))  # the temporary file is gone
    accuracy = _lines(plots.history_figure(table), "accuracy")
    assert accuracy["validation"] == ([1, 2], [0.6, 0.7])


def test_epochs_without_validation_leave_gaps_not_shifts():
    records = [
        {"epoch": 0, "loss": 1.0},
        {"epoch": 1, "loss": 0.8, "val_loss": 0.9},
        {"epoch": 2, "loss": 0.6},
        {"epoch": 3, "loss": 0.5, "val_loss": 0.7},
    ]
    xs, ys = _lines(plots.history_figure(records), "loss")["validation"]
    assert xs == [1, 2, 3, 4]
    assert math.isnan(ys[0]) and math.isnan(ys[2])
    assert (ys[1], ys[3]) == (0.9, 0.7)


@pytest.mark.parametrize("history", [{}, [], {"loss": ["NA", ""]}])
def test_nothing_to_plot_is_an_error(history):
    with pytest.raises(ValueError, match="no epoch"):
        plots.history_figure(history)


def test_a_figure_shows_itself_in_a_notebook():
    figure = plots.history_figure({"loss": [1.0, 0.5]})
    assert figure._repr_png_().startswith(PNG_MAGIC)


SWEEP = [
    {"job": "0", "optimizer.learning_rate": "0.0001", "val_accuracy": "0.80", "val_loss": "0.6"},
    {"job": "1", "optimizer.learning_rate": "0.001", "val_accuracy": "0.95", "val_loss": "0.2"},
    {"job": "2", "optimizer.learning_rate": "0.01", "val_accuracy": "", "val_loss": ""},
    {"job": "3", "optimizer.learning_rate": "0.1", "val_accuracy": "0.90", "val_loss": "0.3"},
]


def test_sweep_plot_marks_the_best_job_and_the_best_so_far(tmp_path: Path):
    table = _write_csv(tmp_path / "summary.csv", SWEEP)
    figure = plots.sweep_figure(table)
    (ax,) = figure.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["val_accuracy"].get_ydata()) == [0.80, 0.95, 0.90]  # the failed job left out
    assert list(lines["best so far"].get_ydata()) == [0.80, 0.95, 0.95]
    assert list(lines["best"].get_ydata()) == [0.95]
    assert "(1 without a value)" in ax.get_title()
    assert ax.get_xlabel() == "job"


def test_sweep_direction_follows_the_objective():
    figure = plots.sweep_figure(SWEEP, objective="val_loss")
    (ax,) = figure.axes
    best = next(line for line in ax.get_lines() if line.get_label() == "best")
    assert list(best.get_ydata()) == [0.2]
    assert ax.get_ylabel() == "val_loss (min)"


def test_sweep_against_a_hyperparameter_uses_a_log_axis():
    figure = plots.sweep_figure(SWEEP, x="optimizer.learning_rate")
    (ax,) = figure.axes
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() == "optimizer.learning_rate"


def test_write_sweep_puts_the_png_next_to_the_table(tmp_path: Path):
    table = _write_csv(tmp_path / "trials.csv", [{"trial_id": "a", "score": "1.5"}])
    path = plots.write_sweep(table)
    assert path == tmp_path / "trials.png"
    assert path.read_bytes().startswith(PNG_MAGIC)


def test_sweep_errors_name_the_columns():
    with pytest.raises(ValueError, match="Columns: job, lr"):
        plots.sweep_figure([{"job": "0", "lr": "1"}])
    with pytest.raises(ValueError, match=r"\('nope'\) is not a column"):
        plots.sweep_figure(SWEEP, objective="nope")
    with pytest.raises(ValueError, match="direction"):
        plots.sweep_figure(SWEEP, direction="up")


def _drive(callback: Curves, epochs: list[dict]) -> None:
    callback.on_train_begin()
    for epoch, logs in enumerate(epochs):
        callback.on_epoch_end(epoch, logs)
    callback.on_train_end()
    callback.wait()


def test_curves_callback_writes_at_the_end(tmp_path: Path):
    path = tmp_path / "curves.png"
    callback = Curves(path=path)
    callback.on_train_begin()
    callback.on_epoch_end(0, {"loss": 1.0, "val_loss": 1.2})
    assert not path.exists()  # min_interval (60 s) has not passed
    callback.on_epoch_end(1, {"loss": 0.5})
    callback.on_train_end()
    callback.wait()
    assert path.read_bytes().startswith(PNG_MAGIC)
    assert [r["epoch"] for r in callback.records] == [0.0, 1.0]


def test_curves_callback_with_no_interval_writes_every_epoch(tmp_path: Path):
    path = tmp_path / "curves.png"
    callback = Curves(path=path, min_interval=0)
    callback.on_train_begin()
    callback.on_epoch_end(0, {"loss": 1.0})
    callback.wait()
    assert path.is_file()


def test_curves_callback_failure_is_a_warning_not_a_crash(tmp_path: Path, caplog):
    (tmp_path / "curves.png").mkdir()  # the path is taken by a folder
    with caplog.at_level(logging.WARNING, logger="kdist.callbacks.curves"):
        _drive(Curves(path=tmp_path / "curves.png"), [{"loss": 1.0}])
    assert "could not write" in caplog.text


def test_curves_callback_checks_its_argument(tmp_path: Path):
    with pytest.raises(ValueError, match="min_interval"):
        Curves(path=tmp_path / "c.png", min_interval=-1)


def test_a_run_writes_curves_png(tmp_path: Path, tiny):
    from helpers import compose

    import kdist

    exp = kdist.Experiment(compose(tiny))
    exp.fit()
    assert wait_for_writes(timeout=60)  # drawn in the background when training ends
    assert (exp.run_dir / "curves.png").read_bytes().startswith(PNG_MAGIC)


def test_callbacks_minimal_writes_no_curves(tmp_path: Path, tiny):
    from helpers import compose

    import kdist

    exp = kdist.Experiment(compose([*tiny, "callbacks=minimal"]))
    exp.fit()
    assert not (exp.run_dir / "curves.png").exists()


def test_summary_csv_objective_named_by_objective_name():
    rows = [
        {"job": "0", "status": "COMPLETED", "objective": "0.4", "objective_name": "val_loss"},
        {"job": "1", "status": "COMPLETED", "objective": "0.3", "objective_name": "val_loss"},
    ]
    (ax,) = plots.sweep_figure(rows).axes
    assert ax.get_ylabel() == "val_loss (min)"
    best = next(line for line in ax.get_lines() if line.get_label() == "best")
    assert list(best.get_ydata()) == [0.3]


def _summary(rows: list[dict]) -> list[dict]:
    """summary.csv rows: `overrides` holds each job's command-line overrides."""
    return [
        {
            **row,
            "status": "COMPLETED",
            "overrides": " ".join(f"{k}={row[k]}" for k in ("optimizer.learning_rate", "model")),
        }
        for row in rows
    ]


MULTIRUN = _summary(
    [
        {"job": "0", "optimizer.learning_rate": "0.001", "model": "mlp", "objective": "0.30"},
        {"job": "1", "optimizer.learning_rate": "0.001", "model": "cnn", "objective": "0.20"},
        {"job": "2", "optimizer.learning_rate": "0.003", "model": "mlp", "objective": "0.25"},
        {"job": "3", "optimizer.learning_rate": "0.003", "model": "cnn", "objective": ""},
    ]
)
for _row in MULTIRUN:
    _row.update(objective_name="val_mae", objective_direction="min", trainer="fast_dev")


def test_a_multirun_plot_has_a_panel_per_swept_key_against_its_values():
    assert plots.swept_keys(MULTIRUN) == ["optimizer.learning_rate", "model"]
    figure = plots.sweep_figure(MULTIRUN)
    rate, model = (ax for ax in figure.axes if ax.get_visible())
    assert (rate.get_xlabel(), model.get_xlabel()) == ("optimizer.learning_rate", "model")
    points = {line.get_label(): line for line in rate.get_lines()}
    # The job without a value is left out; the x axis holds the swept values.
    assert list(points["val_mae"].get_xdata()) == [0.001, 0.001, 0.003]
    assert list(points["val_mae"].get_ydata()) == [0.30, 0.20, 0.25]
    # val_mae with direction min: the minimum is best, in every panel.
    assert list(points["best"].get_xdata()) == [0.001] and list(points["best"].get_ydata()) == [0.2]
    assert rate.get_ylabel() == "val_mae (min)"
    # A categorical key: categories at 0, 1 in the sweep's order, named on the axis.
    categories = {line.get_label(): line for line in model.get_lines()}
    assert list(categories["val_mae"].get_xdata()) == [0.0, 1.0, 0.0]
    assert [t.get_text() for t in model.get_xticklabels()] == ["mlp", "cnn"]
    assert list(categories["best"].get_xdata()) == [1.0]
    assert "(1 without a value)" in figure.get_suptitle()


def test_the_direction_is_the_objectives_not_a_guess_from_its_name():
    # A metric named like a score but minimised: the recorded direction wins.
    rows = [
        {"job": "0", "objective": "0.9", "objective_name": "score", "objective_direction": "min"},
        {"job": "1", "objective": "0.5", "objective_name": "score", "objective_direction": "min"},
    ]
    (ax,) = plots.sweep_figure(rows).axes
    best = next(line for line in ax.get_lines() if line.get_label() == "best")
    assert list(best.get_ydata()) == [0.5]
    # Without a recorded direction, kdist's rule for the name: val_mae is an error.
    rows = [{k: v for k, v in r.items() if k != "objective_direction"} for r in MULTIRUN]
    (ax, _) = (a for a in plots.sweep_figure(rows).axes if a.get_visible())
    assert ax.get_ylabel() == "val_mae (min)"


def test_one_swept_key_gives_one_panel_titled_with_it():
    rows = _summary(
        [
            {"job": "0", "optimizer.learning_rate": "0.001", "model": "mlp", "objective": "0.9"},
            {"job": "1", "optimizer.learning_rate": "0.003", "model": "mlp", "objective": "0.8"},
        ]
    )
    (ax,) = plots.sweep_figure(rows).axes
    assert ax.get_xlabel() == "optimizer.learning_rate"
    assert ax.get_title() == "objective (max) vs optimizer.learning_rate"
    assert ax.get_xscale() == "linear"  # not two decades apart


def test_the_multirun_end_says_where_the_summary_and_plot_are(tmp_path: Path):
    from kdist.runs.sweep import where_message

    table = _write_csv(tmp_path / "summary.csv", MULTIRUN)
    rows = [dict(r) for r in MULTIRUN]
    assert where_message(table, rows) == (
        # The best job by the objective's own direction (val_mae: min).
        f"kdist: multirun done, 4 of 4 job(s) completed, best job 1 (val_mae 0.2); summary {table} "
        "(no plot: no job has a value to draw)"
    )
    plots.write_sweep(table)
    (tmp_path / "0" / "tensorboard").mkdir(parents=True)
    rows[0]["run_dir"] = "0"
    assert where_message(table, rows) == (
        f"kdist: multirun done, 4 of 4 job(s) completed, best job 1 (val_mae 0.2); "
        f"summary {table}, "
        f"plot {tmp_path / 'summary.png'}; compare the jobs: tensorboard --logdir {tmp_path} "
        "(HParams tab)"
    )
