"""The site's figures, `docs/figures/*.svg`, drawn by `python -m kdist.docs`.

Two drawings (`kdist.pages.diagrams`: the path of a run, the sync modes) and two charts of
measured numbers, read from the benchmark results committed in `benchmarks/results/` (the
tables `python -m benchmarks` wrote), never typed here: the scaling of local clusters
against one process (`scaling-device-16core.md`, `scaling-quick-clusters.md`) and the
validation accuracy of each sync mode (`local-sgd.md`). The SVG is written without a date,
with text as text and a fixed id salt, so the same data draws the same file: the docs check
(`python -m kdist.docs --check`) names a figure whose results changed.

Example:

```python
from kdist.pages.figures import figures, scaling_rows
svg = figures()["figures/scaling.svg"]
scaling_rows("scaling-device-16core.md")   # [("2 MWMS workers", 0.369), ...]
```
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["FIGURES", "RESULTS", "figures", "quality_rows", "scaling_rows"]

# The benchmark results of a checkout (absent from an installed wheel: then no figures).
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
# The scaling results drawn, and their captions.
SCALING_FILES = {
    "scaling-device-16core.md": "16-core machine, global batch 256",
    "scaling-quick-clusters.md": "2 shared cores, global batch 128 (quick form)",
}
QUALITY_FILE = "local-sgd.md"
_RATIO_TO_ONE_PROCESS = re.compile(r"^(?P<job>.+?) / (?:recommender, )?1 process \(examples/s\)$")
# Typed `Any`: matplotlib's stubs type rc keys as a closed set of literals.
_STYLE: Any = {
    "svg.hashsalt": "kdist",  # the same ids at every drawing
    "svg.fonttype": "none",  # text stays text: no glyph paths that depend on FreeType
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def _table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row of `text` (header and rule rows included)."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|")
    ]


def scaling_rows(name: str, results: Path = RESULTS) -> list[tuple[str, float]]:
    """The "... / 1 process" rows of a scaling results file: examples/s against one process.

    Args:
        name: the file under `results`, e.g. `"scaling-device-16core.md"`.
        results: the results folder. Defaults to `RESULTS`.

    Returns:
        `(job, ratio)` pairs in the file's order: the median of the per-round ratios.
    """
    rows = []
    for cells in _table_rows((results / name).read_text()):
        matched = _RATIO_TO_ONE_PROCESS.match(cells[0])
        if matched and len(cells) > 3:
            rows.append((matched["job"], float(cells[3].split()[0])))
    return rows


def quality_rows(results: Path = RESULTS) -> dict[str, list[tuple[str, float]]]:
    """The validation accuracy of each sync mode, per job, from the local-SGD results.

    Args:
        results: the results folder. Defaults to `RESULTS`.

    Returns:
        Job name (`digits`, `cnn_synthetic`) -> `(mode, mean accuracy)` pairs.
    """
    jobs: dict[str, list[tuple[str, float]]] = {}
    job = None
    for line in (results / QUALITY_FILE).read_text().splitlines():
        if line.startswith("### "):
            job = line[4:].strip()
            jobs[job] = []
        elif job and line.startswith("| ") and re.match(r"\| \w+ \| [0-9.]+ \|", line):
            mode, accuracy = _table_rows(line)[0][:2]
            jobs[job].append((mode, float(accuracy)))
    return jobs


def _scaling(figure_class: Any) -> Any:
    panels = [(name, caption, scaling_rows(name)) for name, caption in SCALING_FILES.items()]
    figure = figure_class(figsize=(8.0, 1.2 + 0.32 * sum(len(rows) for *_, rows in panels)))
    heights = [len(rows) for *_, rows in panels]
    grid = figure.add_gridspec(len(panels), 1, height_ratios=heights, hspace=0.55)
    for index, (name, caption, rows) in enumerate(panels):
        axes = figure.add_subplot(grid[index])
        labels = [job for job, _ in rows][::-1]
        values = [ratio for _, ratio in rows][::-1]
        bars = axes.barh(labels, values, color="#1f77b4")
        axes.bar_label(bars, labels=[f"{v:.2f}" for v in values], padding=3, fontsize=8)
        axes.axvline(1.0, color="#7f7f7f", linestyle="--", linewidth=1)
        axes.set_xlim(0, 1.15)
        axes.set_title(f"{caption}: benchmarks/results/{name}", fontsize=9, loc="left")
    axes.set_xlabel("examples/s against one process using the same cores (1.0: dashed)")
    figure.subplots_adjust(left=0.32, right=0.97, top=0.93, bottom=0.1)
    return figure


def _quality(figure_class: Any) -> Any:
    jobs = quality_rows()
    figure = figure_class(figsize=(8.0, 3.6))
    for index, (job, rows) in enumerate(jobs.items()):
        axes = figure.add_subplot(1, len(jobs), index + 1)
        modes = [mode for mode, _ in rows]
        values = [accuracy for _, accuracy in rows]
        baseline = dict(rows)["every_step"]
        colors = [
            "#ff7f0e" if m == "every_step" else "#2ca02c" if m.startswith("local") else "#9467bd"
            for m in modes
        ]
        axes.bar(range(len(rows)), values, color=colors)
        axes.axhspan(baseline - 0.01, baseline, color="#dddddd", zorder=0)
        axes.set_xticks(range(len(rows)), modes, rotation=45, ha="right")
        low = min(values) - 0.03
        axes.set_ylim(low, max(values) + 0.02)
        axes.set_title(f"{job} (mean of 2 seeds)", fontsize=9, loc="left")
        for x, value in enumerate(values):
            axes.text(x, value + 0.002, f"{100 * value:.2f}", ha="center", fontsize=6.5)
    figure.axes[0].set_ylabel("validation accuracy")
    figure.text(
        0.01,
        0.01,
        "labels in %; grey band: within 1 point of every_step (the target); "
        "benchmarks/results/local-sgd.md",
        fontsize=7.5,
    )
    figure.subplots_adjust(left=0.1, right=0.99, top=0.92, bottom=0.3, wspace=0.22)
    return figure


def _architecture(figure_class: Any) -> Any:
    from kdist.pages.diagrams import architecture

    return architecture(figure_class)


def _sync_modes(figure_class: Any) -> Any:
    from kdist.pages.diagrams import sync_modes

    return sync_modes(figure_class)


# Each figure's path under docs/ -> what draws it (given `matplotlib.figure.Figure`).
FIGURES: dict[str, Callable[[Any], Any]] = {
    "figures/architecture.svg": _architecture,
    "figures/sync-modes.svg": _sync_modes,
    "figures/scaling.svg": _scaling,
    "figures/sync-quality.svg": _quality,
}


def _svg(figure: Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": "kdist.docs"})
    return buffer.getvalue()


def figures() -> dict[str, str]:
    """Every figure of the site, drawn: its path under `docs/` -> the SVG text.

    Returns:
        Empty outside a checkout (no `benchmarks/results/`).
    """
    if not RESULTS.is_dir():
        return {}
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_STYLE):
        return {path: _svg(draw(Figure)) for path, draw in FIGURES.items()}
