"""kdist's training engine: a controller that owns the run, over a runner per strategy."""

from kdist.engine.building import build_for_training
from kdist.engine.controller import Controller, FitResult, Schedule
from kdist.engine.runner import Logs, Runner
from kdist.engine.standard_runner import StandardRunner
from kdist.engine.step import StepRunner

__all__ = [
    "Controller",
    "FitResult",
    "Logs",
    "Runner",
    "Schedule",
    "StandardRunner",
    "StepRunner",
    "build_for_training",
]
