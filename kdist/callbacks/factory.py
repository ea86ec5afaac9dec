"""Build the run's Keras callbacks from the `callbacks` node."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import keras

from kdist.config.build import instantiate

__all__ = ["build", "monitor_mode"]


def monitor_mode(monitor: str, mode: str, directions: Mapping[str, str]) -> str:
    """`mode` for a monitored metric: as configured, or `min`/`max` from the metric itself.

    Keras infers it from compiled metrics, which kdist's engine does not use.
    """
    if mode != "auto":
        return mode
    name = monitor.removeprefix("val_")
    if name in directions:
        return directions[name]
    return "min" if name.endswith("loss") else "max"


def build(
    callbacks_cfg: Any,
    *,
    output_dir: Path,
    directions: Mapping[str, str] | None = None,
    resuming: bool = False,
) -> list[keras.callbacks.Callback]:
    """The callbacks a `callbacks` node asks for, writing under `output_dir`.

    Args:
        callbacks_cfg: the `callbacks` config node.
        output_dir: where files go: the run directory on the chief, a temporary folder on
            other workers (see `kdist.chief.writable_dir`).
        directions: metric name -> `min` or `max`, for monitored metrics. Defaults to
            `None`: losses are minimised, everything else maximised.
        resuming: the run continues from a backup: `history.csv` is appended to.
            Defaults to `False`.

    Returns:
        Keras callbacks, in the order they run.
    """
    callbacks: list[keras.callbacks.Callback] = []
    if callbacks_cfg.tensorboard.enabled:
        callbacks.append(
            keras.callbacks.TensorBoard(
                log_dir=str(output_dir / "tensorboard"),
                update_freq=callbacks_cfg.tensorboard.update_freq,
                write_graph=False,
            )
        )
    if callbacks_cfg.csv.enabled:
        callbacks.append(
            keras.callbacks.CSVLogger(str(output_dir / "history.csv"), append=resuming)
        )
    stopping = callbacks_cfg.early_stopping
    if stopping.enabled:
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor=stopping.monitor,
                patience=int(stopping.patience),
                mode=monitor_mode(stopping.monitor, stopping.mode, directions or {}),
                restore_best_weights=bool(stopping.restore_best_weights),
            )
        )
    for node in callbacks_cfg.extra or []:
        callbacks.append(instantiate(node, _convert_="all"))
    return callbacks
