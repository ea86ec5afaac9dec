"""The interface the controller drives; one runner per kind of strategy."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Logs", "Runner", "metric_results", "to_floats"]

# Metric name -> value (a scalar tensor between steps, a float at epoch ends).
Logs = Mapping[str, Any]


class Runner(abc.ABC):
    """Runs training and evaluation steps under one strategy.

    The controller (`kdist.engine.controller.fit`) owns epochs, callbacks and validation
    timing; a runner owns how steps run: `StandardRunner` for the synchronous strategies
    (one device, mirrored, multi-worker mirrored). A runner for another kind of strategy
    implements the same four methods.
    """

    @abc.abstractmethod
    def train_loop_begin(self, *, reset_metrics: bool = True) -> None:
        """Start an epoch: reset the training metrics (not when resuming inside it)."""

    @abc.abstractmethod
    def train_steps(self, num_steps: int) -> Logs:
        """Run `num_steps` optimizer steps and return the epoch's running metrics."""

    @abc.abstractmethod
    def train_loop_end(self) -> dict[str, float]:
        """End an epoch: the training metrics as floats."""

    @abc.abstractmethod
    def evaluate(self) -> dict[str, float]:
        """Run the validation data once and return its metrics as floats."""


def metric_results(loss: Any, metrics: Sequence[Any]) -> Logs:
    """`{"loss": ..., <metric name>: ...}` from a loss tracker and Keras metrics.

    A metric whose result is a dict contributes each of its entries.
    """
    logs = {"loss": loss.result()}
    for metric in metrics:
        result = metric.result()
        if isinstance(result, dict):
            logs.update(result)
        else:
            logs[metric.name] = result
    return logs


def to_floats(logs: Logs) -> dict[str, float]:
    """The logs with every value as a Python float."""
    return {name: float(value) for name, value in logs.items()}
