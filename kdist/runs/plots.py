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
from matplotlib.ticker import MaxNLocator, NullFormatter

from kdist.runs.fileio import atomic_path, read_csv
from kdist.runs.plot_axes import fit_labels, log_scale

__all__ = [
    "OBJECTIVE_COLUMNS",
    "history_figure",
    "sweep_figure",
    "swept_keys",
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
        ax.legend(loc="upper right", fontsize="small")  # a fixed place: "best" is timed
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


def swept_keys(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys a multirun swept: overrides whose value differs between its jobs.

    Read from `summary.csv`'s `overrides` column (each job's `key=value` overrides), in
    the order the command gave them; a table without that column (a tuner's
    `trials.csv`) has none.
    """
    keys: list[str] = []
    for row in rows:
        for word in str(row.get("overrides") or "").split():
            key, sep, _ = word.partition("=")
            key = key.lstrip("+")
            if sep and key in row and key not in keys:
                keys.append(key)
    swept = []
    for key in keys:
        values = {str(row.get(key, "")).strip() for row in rows}
        if len(values) > 1:
            swept.append(key)
    return swept


def _direction(rows: Sequence[Mapping[str, Any]], objective: str, label: str) -> str:
    """The objective's direction: the one `summary.csv` recorded, else kdist's rule."""
    from kdist.config.objective import direction_of

    if objective == "objective":
        recorded = {str(r.get("objective_direction") or "") for r in rows} - {""}
        if len(recorded) == 1:
            return recorded.pop()
    return direction_of(label)


def _axis_values(rows: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[str]]:
    """A panel's x values: numbers as they are, else categories at 0, 1, ... (named)."""
    texts = [str(r.get(key, "")).strip() for r in rows]
    numbers = [_number(t) for t in texts]
    given = [n for n, t in zip(numbers, texts, strict=True) if t.lower() not in _MISSING]
    if given and not any(math.isnan(n) for n in given):
        return numbers, []
    categories = list(dict.fromkeys(t for t in texts if t.lower() not in _MISSING))
    positions = [float(categories.index(t)) if t in categories else math.nan for t in texts]
    return positions, categories


def sweep_figure(
    table: str | Path | Sequence[Mapping[str, Any]],
    *,
    objective: str | None = None,
    direction: str | None = None,
    x: str | Sequence[str] | None = None,
    title: str | None = None,
    log_keys: Sequence[str] = (),
) -> Figure:
    """The objective of each job or trial of a sweep, against the swept values.

    A multirun's `summary.csv` gets one panel per swept key (an override whose value
    differs between jobs): the objective against that key's values, numbers on a number
    axis (a log axis when they span two decades), other values as categories. A table
    with no swept key (a tuner's `trials.csv`, one job) shows the objective per trial or
    job with the best so far. The best job or trial is starred in every panel.

    Args:
        table: the path of a `summary.csv` (one row per multirun job) or `trials.csv`
            (one row per tuner trial), or the rows as dicts.
        objective: the column to plot. Defaults to `None`: the first of
            `OBJECTIVE_COLUMNS` present (for `objective`, the metric named in an
            `objective_name` column labels the plot).
        direction: `"max"` or `"min"`: which value is best. Defaults to `None`: the
            `objective_direction` column of `summary.csv` (the run's `objective.direction`),
            else kdist's rule for the name (`kdist.config.objective.direction_of`: `min`
            for losses and errors such as `val_mae`).
        x: a column, or several (one panel each), to plot the objective against.
            Defaults to `None`: the swept keys (`swept_keys`), else the trial or job order.
        title: the figure's title. Defaults to `None`: the objective's name.
        log_keys: keys the sweep sampled on a log scale (a sweeper's `log` tag): their
            axis is logarithmic. Defaults to `()`: a log axis for positive values that
            span two decades or step by one ratio (1e-4, 1e-3, 1e-2).

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
        direction = _direction(rows, objective, label)
    if direction not in ("min", "max"):
        raise ValueError(f"`direction` ({direction!r}) must be 'min' or 'max'.")
    if x is None:
        keys = swept_keys(rows)
    else:
        keys = [x] if isinstance(x, str) else list(x)
        keys = [_pick(columns, key, (), "x") for key in keys]
    id_column = next((c for c in _ID_COLUMNS if c in columns), None)
    ids = [str(r.get(id_column, i)) if id_column else str(i) for i, r in enumerate(rows)]
    values = [_number(r.get(objective)) for r in rows]
    done = [i for i, v in enumerate(values) if not math.isnan(v)]
    failed = len(rows) - len(done)
    pick = max if direction == "max" else min
    best = pick(done, key=lambda i: values[i]) if done else None

    logs = set(log_keys)
    panels = max(len(keys), 1)
    grid = (math.ceil(panels / 3), min(panels, 3))
    figure = _Figure(figsize=(grid[1] * 5.2, grid[0] * 4.0), layout="constrained")
    axes = figure.subplots(*grid, squeeze=False).ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    if not keys:
        ax = axes[0]
        positions = [float(p) for p in range(len(rows))]
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
        _mark_best(ax, best, positions, values, ids)
        _finish(ax, label, direction)
    for ax, key in zip(axes, keys, strict=False):
        xs, categories = _axis_values(rows, key)
        shown = [i for i in done if not math.isnan(xs[i])]
        ax.plot([xs[i] for i in shown], [values[i] for i in shown], "o", label=label)
        if categories:
            ax.set_xticks(range(len(categories)), categories)
            ax.set_xlim(-0.5, len(categories) - 0.5)
        elif log_scale([xs[i] for i in range(len(rows)) if not math.isnan(xs[i])], key in logs):
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap the major
        ax.set_xlabel(key)
        _mark_best(ax, best if best in shown else None, xs, values, ids)
        _finish(ax, label, direction)
    against = f" vs {', '.join(keys)}" if keys else f" per {id_column or 'job'}"
    heading = title or f"{label} ({direction}){against}"
    if failed:
        heading += f" ({failed} without a value)"
    if len(keys) > 1:
        figure.suptitle(heading)
    else:
        axes[0].set_title(heading)
    fit_labels(figure)
    return figure


def _mark_best(
    ax: Any, best: int | None, xs: Sequence[float], values: Sequence[float], ids: Sequence[str]
) -> None:
    if best is None:
        return
    ax.plot([xs[best]], [values[best]], "*", markersize=14, color="tab:red", label="best")
    ax.annotate(
        f"{ids[best]}: {values[best]:.4g}",
        (xs[best], values[best]),
        textcoords="offset points",
        xytext=(6, 6),
        fontsize="small",
    )


def _finish(ax: Any, label: str, direction: str) -> None:
    ax.set_ylabel(f"{label} ({direction})")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")  # fixed: "best" is timed
    ax.margins(y=0.12)  # room for the best point's label


def write_sweep(
    table: str | Path,
    path: str | Path | None = None,
    **kwargs: Any,
) -> Path:
    """Write `sweep_figure(table)` next to the table (`summary.csv` -> `summary.png`).

    Args:
        table: the path of a `summary.csv` or `trials.csv`.
        path: the PNG file to write. Defaults to `None`: the table's path with `.png`.
        **kwargs: `objective`, `direction`, `x`, `title`, `log_keys`, as for `sweep_figure`.

    Returns:
        The path written.
    """
    target = Path(path) if path is not None else Path(table).with_suffix(".png")
    return write_figure(sweep_figure(table, **kwargs), target)
