"""kdist's training engine: one controller loop over a runner per kind of strategy."""

from kdist.engine.building import build_for_training
from kdist.engine.controller import FitResult, fit
from kdist.engine.runner import Logs, Runner, StepRunner
from kdist.engine.standard_runner import StandardRunner

__all__ = [
    "FitResult",
    "Logs",
    "Runner",
    "StandardRunner",
    "StepRunner",
    "build_for_training",
    "fit",
]
