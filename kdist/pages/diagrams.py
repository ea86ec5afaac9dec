"""The site's two drawings: the path of a run through kdist, and the three sync modes.

Drawn with matplotlib (a dependency of kdist for `curves.png`), as `kdist.pages.figures`
draws the benchmark charts, so that a change of the code's story is a change of this file
and `python -m kdist.docs` redraws them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RUN_PATH", "SYNC_EVERY", "architecture", "sync_modes"]

# The path of one run (docs/architecture.md's table, in the order `Experiment` follows):
# the step, then the modules that own it.
RUN_PATH: tuple[tuple[str, str], ...] = (
    (
        "kdist train ... / kdist.compose + Experiment",
        "a command line or a notebook (kdist.train, kdist.experiment)",
    ),
    (
        "setup, once: compose, validate, cluster, resume",
        "a frozen RunSetup handed on (kdist.run_setup; kdist.config, kdist.cluster, kdist.runs)",
    ),
    ("runtime setup", "log level, threads, logical devices, seeds, precision (kdist.process)"),
    ("strategy", "one of five tf.distribute strategies (kdist.strategies)"),
    (
        "in strategy.scope(): model, optimizer, metrics; data",
        "kdist.models, kdist.modeling; a sharded dataset_fn per split (kdist.data)",
    ),
    (
        "engine loop",
        "Keras's train_step under strategy.run, K steps a call, or the coordinator (kdist.engine)",
    ),
    (
        "outputs (chief only)",
        "metrics.json, history.csv, checkpoints/, backup/, TensorBoard, model.keras",
    ),
)
# The period drawn in the sync-mode timelines.
SYNC_EVERY = 4
_STEPS = 12
_BLUE, _ORANGE, _GREY, _GREEN = "#1f77b4", "#ff7f0e", "#7f7f7f", "#2ca02c"


def architecture(figure_class: Any) -> Any:
    """The path of a run, from the command or notebook to its outputs, one box a step.

    Args:
        figure_class: `matplotlib.figure.Figure`.

    Returns:
        The figure.
    """
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    rows = len(RUN_PATH)
    figure = figure_class(figsize=(8.0, 0.78 * rows + 0.3))
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, 10)
    axes.set_ylim(-0.6, rows - 0.2)
    axes.axis("off")
    for index, (title, detail) in enumerate(RUN_PATH):
        y = rows - 1 - index
        scoped = title.startswith(("in strategy.scope", "engine"))
        axes.add_patch(
            FancyBboxPatch(
                (0.4, y - 0.34),
                9.2,
                0.68,
                boxstyle="round,pad=0.02,rounding_size=0.12",
                facecolor="#e8f0fb" if scoped else "#f4f4f4",
                edgecolor=_BLUE if scoped else _GREY,
            )
        )
        axes.text(0.6, y + 0.1, f"{index + 1}. {title}", fontsize=10.5, weight="bold", va="center")
        axes.text(0.6, y - 0.16, detail, fontsize=8.5, color="#333333", va="center")
        if index:
            axes.add_patch(
                FancyArrowPatch(
                    (5.0, y + 0.66), (5.0, y + 0.36), arrowstyle="-|>", mutation_scale=12
                )
            )
    return figure


def _timeline(axes: Any, row: float, mode: str) -> None:
    """Two replicas' steps on one row of the sync-mode figure, joined where they sync."""
    for replica, offset in enumerate((0.18, -0.18)):
        y = row + offset
        axes.plot([0.5, _STEPS + 0.5], [y, y], color=_GREY, linewidth=0.8)
        axes.scatter(range(1, _STEPS + 1), [y] * _STEPS, s=28, color=_BLUE, zorder=3)
        axes.text(0.35, y, f"replica {replica}", ha="right", va="center", fontsize=8)
    synced = range(1, _STEPS + 1) if mode == "every_step" else range(SYNC_EVERY, _STEPS + 1, 4)
    color = {"every_step": _ORANGE, "local_sgd": _GREEN, "diloco": "#9467bd"}[mode]
    for step in synced:
        axes.plot([step + 0.25] * 2, [row - 0.3, row + 0.3], color=color, linewidth=2.5)


def sync_modes(figure_class: Any) -> Any:
    """Timelines of `every_step`, `local_sgd` and `diloco` over 12 steps of 2 replicas.

    Args:
        figure_class: `matplotlib.figure.Figure`.

    Returns:
        The figure.
    """
    figure = figure_class(figsize=(8.0, 4.4))
    axes = figure.add_axes((0.12, 0.1, 0.86, 0.86))
    captions = {
        "every_step": "all-reduce of the gradients at every step (the default)",
        "local_sgd": f"own optimizer steps; weights replaced by their mean every {SYNC_EVERY}",
        "diloco": f"inner steps; every {SYNC_EVERY}, an outer Nesterov step on the mean change",
    }
    for index, (mode, caption) in enumerate(captions.items()):
        row = 2 - index
        _timeline(axes, row * 1.3, mode)
        axes.text(0.5, row * 1.3 + 0.42, f"{mode}: {caption}", fontsize=9, weight="bold")
    axes.set_xlim(-1.2, _STEPS + 0.8)
    axes.set_ylim(-0.55, 3.2)
    axes.set_yticks([])
    axes.set_xticks(range(1, _STEPS + 1))
    axes.set_xlabel(
        f"training step (sync_every={SYNC_EVERY}); a dot is a replica's step, a bar a sync"
    )
    for side in ("left", "right", "top"):
        axes.spines[side].set_visible(False)
    return figure
