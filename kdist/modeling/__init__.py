"""The run's model: built in the strategy's scope and compiled from the config.

`build` builds and compiles the run's model and its runner, `compiling` builds the loss,
metrics and loss weights, `optimizers`, `schedules` and `lazy_optimizers` the optimizer,
`batch_plan` the global batch and the schedule. The names of `build` are re-exported
here, imported when first used (importing `kdist.modeling.optimizers` does not import the
engine).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "check_lookup_tables",
    "check_parameter_server",
    "check_targets",
    "compiled_model",
    "runner_for",
    "synchronize",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'kdist.modeling' has no attribute {name!r}")
    return getattr(importlib.import_module("kdist.modeling.build"), name)
