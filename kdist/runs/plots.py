"""Plots of a run and of a sweep: `curves.png` (per epoch) and the objective per trial or job.

Figures are built with `matplotlib.figure.Figure`, never `pyplot`, so plotting needs no
display, leaves the process's matplotlib state alone and is safe in a training process;
a notebook shows a returned figure as a cell's last value or with `display(fig)`.

Example:

```python
history = exp.fit()
kdist.runs.plots.history_figure(history)                 # in a notebook
kdist.runs.plots.write_curves(history, "curves.png")     # to a file
kdist.runs.plots.write_sweep("multirun/2026-11-21/10-00-00/summary.csv")   # -> summary.png
```
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from kdist.runs.fileio import atomic_path, read_csv

__all__ = [
    "OBJECTIVE_COLUMNS",
    "history_figure",
    "sweep_figure",
    "write_curves",
    "write_figure",
    "write_sweep",
]

# Columns a sweep table's objective is looked up in, in order, when none is named.
OBJECTIVE_COLUMNS = (
    "objective",
    "score",
    "val_accuracy",
    "validation.accuracy",
    "val_loss",
    "validation.loss",
    "accuracy",
    "loss",
)
# Columns that name a trial or job, in order; the row's position is used without one.
_ID_COLUMNS = ("trial_id", "trial", "job", "job_id", "job.num", "num")
_MISSING = {"", "na", "nan", "none", "null"}


class _Figure(Figure):
    """A `Figure` that a notebook shows as a PNG without pyplot or `%matplotlib inline`."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()


def _number(value: Any) -> float:
    """`value` as a float; NaN for blanks, `NA` and anything that is not a number."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    if text.lower() in _MISSING:
        return math.nan
    try:
        return float(text)
    except ValueError:
        return math.nan


def _epoch_series(history: Any) -> tuple[list[int], dict[str, list[float]]]:
    """Epoch numbers (1-based) and one equally long series per logged value."""
    if isinstance(history, (str, Path)):
        history = read_csv(history)
    if hasattr(history, "history") and isinstance(history.history, Mapping):
        # A keras History: `epoch` holds the 0-based epochs that were run.
        epochs = [int(e) + 1 for e in getattr(history, "epoch", [])]
        history = history.history
        columns = {k: [_number(v) for v in values] for k, values in history.items()}
        count = max((len(v) for v in columns.values()), default=0)
        epochs = epochs if len(epochs) == count else list(range(1, count + 1))
    elif isinstance(history, Mapping):
        columns = {k: [_number(v) for v in values] for k, values in history.items()}
        count = max((len(v) for v in columns.values()), default=0)
        given = columns.pop("epoch", None)
        epochs = (
            [int(e) + 1 for e in given]
            if given and len(given) == count and not any(math.isnan(e) for e in given)
            else list(range(1, count + 1))
        )
    elif isinstance(history, Sequence):
        # Per-epoch records, e.g. CSV rows: a value missing from an epoch is NaN there.
        records = [dict(r) for r in history]
        keys: list[str] = []
        for record in records:
            keys += [k for k in record if k not in keys]
        if "epoch" in keys:
            keys.remove("epoch")
            epochs = [int(_number(r.get("epoch", i))) + 1 for i, r in enumerate(records)]
        else:
            epochs = list(range(1, len(records) + 1))
        columns = {k: [_number(r.get(k)) for r in records] for k in keys}
    else:
        raise TypeError(
            "`history` must be a keras History, a dict of lists, a list of per-epoch dicts "
            f"or a CSV path; got {type(history).__name__}."
        )
    # A series shorter than the epochs (a metric logged only by some epochs) is padded.
    series = {
        k: (v + [math.nan] * (len(epochs) - len(v)))[: len(epochs)]
        for k, v in columns.items()
        if not all(math.isnan(x) for x in v)
    }
    return epochs, series


def history_figure(history: Any, *, title: str | None = None) -> Figure:
    """Loss and metrics per epoch, training and validation: one panel per metric.

    Args:
        history: a `keras.callbacks.History` (what `Experiment.fit()` returns), a dict of
            per-epoch lists (`History.history`), a list of per-epoch log dicts, or the
            path of a `history.csv`. Keys starting with `val_` are the validation values.
        title: a title over the panels. Defaults to `None`.

    Returns:
        The `matplotlib.figure.Figure`.

    Raises:
        ValueError: when there is no epoch with a numeric value to plot.
    """
    epochs, series = _epoch_series(history)
    names: list[str] = []
    for key in series:
        name = key.removeprefix("val_")
        if name not in names:
            names.append(name)
    if not epochs or not names:
        raise ValueError("`history` has no epoch with a numeric value to plot.")
    # The loss first: it is what every run has and what a reader looks at first.
    names = sorted(names, key=lambda n: n != "loss")  # stable: the rest keep their order
    columns = min(len(names), 3)
    rows = math.ceil(len(names) / columns)
    figure = _Figure(figsize=(4.4 * columns, 3.3 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    marker = "o" if len(epochs) <= 30 else None
    for ax, name in zip(axes, names, strict=False):
        if name in series:
            ax.plot(epochs, series[name], marker=marker, markersize=3, label="train")
        if f"val_{name}" in series:
            ax.plot(
                epochs,
                series[f"val_{name}"],
                linestyle="--",
                marker=marker or ".",
                markersize=3,
                label="validation",
            )
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    if title:
        figure.suptitle(title)
    return figure


def write_figure(figure: Figure, path: str | Path, *, dpi: int = 100) -> Path:
    """Save `figure` as PNG at `path`, atomically (a reader never sees half a file).

    Returns:
        The path written.
    """
    path = Path(path)
    with atomic_path(path) as partial:
        figure.savefig(partial, dpi=dpi, format="png")
    return path


def write_curves(history: Any, path: str | Path, *, title: str | None = None) -> Path:
    """Write `history_figure(history)` to `path` (a run's `curves.png`).

    Args:
        history: as for `history_figure`.
        path: the PNG file to write.
        title: a title over the panels. Defaults to `None`.

    Returns:
        The path written.
    """
    return write_figure(history_figure(history, title=title), path)


def _pick(columns: Sequence[str], wanted: str | None, candidates: Sequence[str], what: str) -> str:
    if wanted is not None:
        if wanted not in columns:
            raise ValueError(
                f"`{what}` ({wanted!r}) is not a column; columns: {', '.join(columns)}."
            )
        return wanted
    for name in candidates:
        if name in columns:
            return name
    raise ValueError(
        f"no {what} column found (looked for {', '.join(candidates)}); name one with "
        f"`{what}=`. Columns: {', '.join(columns)}."
    )


def sweep_figure(
    table: str | Path | Sequence[Mapping[str, Any]],
    *,
    objective: str | None = None,
    direction: str | None = None,
    x: str | None = None,
    title: str | None = None,
) -> Figure:
    """The objective of each trial or job of a sweep, with the best so far.

    Args:
        table: the path of a `summary.csv` (one row per multirun job) or `trials.csv`
            (one row per tuner trial), or the rows as dicts.
        objective: the column to plot. Defaults to `None`: the first of
            `OBJECTIVE_COLUMNS` present (for `objective`, the metric named in an
            `objective_name` column labels the plot and sets the direction).
        direction: `"max"` or `"min"`: which value is best. Defaults to `None`: `"min"`
            for a loss or error, else `"max"`.
        x: a column to plot the objective against (e.g. `optimizer.learning_rate`,
            on a log axis when it spans two decades). Defaults to `None`: the trial or
            job order, with the best so far as a step line.
        title: the figure's title. Defaults to `None`: the objective's name.

    Returns:
        The `matplotlib.figure.Figure`.

    Raises:
        ValueError: for an unknown column or direction, or a table with no rows.
    """
    rows = read_csv(table) if isinstance(table, (str, Path)) else [dict(r) for r in table]
    if not rows:
        raise ValueError("the sweep table has no rows.")
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    objective = _pick(columns, objective, OBJECTIVE_COLUMNS, "objective")
    # summary.csv names the metric behind its `objective` column in `objective_name`.
    names = {str(r.get("objective_name") or "") for r in rows} - {""}
    label = names.pop() if objective == "objective" and len(names) == 1 else objective
    if direction is None:
        lowered = label.lower()
        direction = "min" if "loss" in lowered or "error" in lowered else "max"
    if direction not in ("min", "max"):
        raise ValueError(f"`direction` ({direction!r}) must be 'min' or 'max'.")
    id_column = next((c for c in _ID_COLUMNS if c in columns), None)
    ids = [str(r.get(id_column, i)) if id_column else str(i) for i, r in enumerate(rows)]
    values = [_number(r.get(objective)) for r in rows]
    done = [i for i, v in enumerate(values) if not math.isnan(v)]
    failed = len(rows) - len(done)

    figure = _Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = figure.subplots()
    pick = max if direction == "max" else min
    best = pick(done, key=lambda i: values[i]) if done else None
    if x is None:
        positions = list(range(len(rows)))
        ax.plot([positions[i] for i in done], [values[i] for i in done], "o", label=label)
        running: list[float] = []
        for i in done:
            running.append(values[i] if not running else pick(running[-1], values[i]))
        if running:
            ax.step(
                [positions[i] for i in done], running, where="post", alpha=0.7, label="best so far"
            )
        ax.set_xlabel(id_column or "job")
        if len(rows) <= 30:
            ax.set_xticks(positions, ids, rotation=90 if len(rows) > 12 else 0)
        xs = [float(p) for p in positions]
    else:
        x = _pick(columns, x, (), "x")
        xs_values = [_number(r.get(x)) for r in rows]
        done = [i for i in done if not math.isnan(xs_values[i])]
        ax.plot([xs_values[i] for i in done], [values[i] for i in done], "o", label=label)
        positive = [xs_values[i] for i in done if xs_values[i] > 0]
        if len(positive) == len(done) and positive and max(positive) / min(positive) >= 100:
            ax.set_xscale("log")
        ax.set_xlabel(x)
        xs = xs_values
    if best is not None and (x is None or best in done):
        ax.plot([xs[best]], [values[best]], "*", markersize=14, color="tab:red", label="best")
        ax.annotate(
            f"{ids[best]}: {values[best]:.4g}",
            (xs[best], values[best]),
            textcoords="offset points",
            xytext=(6, 6),
            fontsize="small",
        )
    ax.set_ylabel(f"{label} ({direction})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    ax.margins(y=0.12)  # room for the best point's label
    heading = title or (f"{label} vs {x}" if x else f"{label} per {id_column or 'job'}")
    if failed:
        heading += f" ({failed} without a value)"
    ax.set_title(heading)
    return figure


def write_sweep(
    table: str | Path,
    path: str | Path | None = None,
    **kwargs: Any,
) -> Path:
    """Write `sweep_figure(table)` next to the table (`summary.csv` -> `summary.png`).

    Args:
        table: the path of a `summary.csv` or `trials.csv`.
        path: the PNG file to write. Defaults to `None`: the table's path with `.png`.
        **kwargs: `objective`, `direction`, `x`, `title`, as for `sweep_figure`.

    Returns:
        The path written.
    """
    target = Path(path) if path is not None else Path(table).with_suffix(".png")
    return write_figure(sweep_figure(table, **kwargs), target)
