"""The axes of kdist's plots: a log scale where a sweep's values call for one, tick
labels that do not overlap, every label inside the figure (`kdist.runs.plots`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["fit_labels", "log_scale"]


def log_scale(xs: Sequence[float], sampled_on_log: bool) -> bool:
    """A log axis for positive values sampled on a log scale, or spanning two decades.

    A sweep's values are taken as log-sampled when the sweeper says so (`log_keys`) or
    when 3 or more of them step by one ratio (1e-4, 1e-3, 1e-2; 1, 2, 4, 8).
    """
    values = sorted(set(xs))
    if not values or values[0] <= 0:
        return False
    if sampled_on_log or values[-1] / values[0] >= 100:
        return True
    if len(values) < 3:
        return False
    ratios = [b / a for a, b in itertools.pairwise(values)]
    steps = [b - a for a, b in itertools.pairwise(values)]
    even_ratios = max(ratios) / min(ratios) < 1.1
    even_steps = max(steps) / min(steps) < 1.1
    return even_ratios and not even_steps


def fit_labels(figure: Figure) -> None:
    """Tick labels that do not overlap, and every label inside the figure.

    The figure is laid out (no drawing to pixels): x tick labels that overlap are turned
    by 45 then 90 degrees, then thinned to every second, fourth ... label; the best point's note is
    moved to the left of its point where it would leave the figure.
    """
    for ax in figure.axes:
        if not ax.get_visible():
            continue
        for _ in range(6):
            figure.draw_without_rendering()
            if not _overlapping(ax.get_xticklabels()):
                break
            labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
            turned = labels[0].get_rotation() if labels else 90
            if turned < 90:
                for text in ax.get_xticklabels():
                    text.set_rotation(turned + 45)
                    text.set_horizontalalignment("right" if turned == 0 else "center")
                continue
            low, high = sorted(ax.get_xlim())
            kept = [
                (loc, text.get_text())
                for loc, text in zip(ax.get_xticks(), ax.get_xticklabels(), strict=False)
                if low <= loc <= high
            ][::2]
            ax.set_xticks([loc for loc, _ in kept], [text for _, text in kept])
    figure.draw_without_rendering()
    box = figure.bbox
    renderer = FigureCanvasAgg(figure).get_renderer()
    for ax in figure.axes:
        for text in ax.texts:
            extent = text.get_window_extent(renderer)
            if extent.x1 > box.x1 or extent.y1 > box.y1:
                text.set_horizontalalignment("right")
                text.set_verticalalignment("top")
                text.xyann = (-6, -6)  # type: ignore[attr-defined]
    figure.draw_without_rendering()


def _overlapping(texts: Sequence[Any]) -> bool:
    """Whether any two visible, non-empty labels' boxes overlap."""
    boxes = [t.get_window_extent() for t in texts if t.get_visible() and t.get_text()]
    boxes.sort(key=lambda b: b.x0)
    return any(a.x1 > b.x0 for a, b in itertools.pairwise(boxes))
