"""kdist's training engine: one controller loop over a runner per kind of strategy."""

from kdist.engine.controller import FitResult, fit
from kdist.engine.runner import Logs, Runner
from kdist.engine.standard_runner import StandardRunner

__all__ = ["FitResult", "Logs", "Runner", "StandardRunner", "fit"]
