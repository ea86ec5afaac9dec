"""kdist: train Keras 3 models under any tf.distribute strategy by changing one word of config.

The package imports TensorFlow only when an attribute that needs it is first used, so
`python -m kdist.train` can check the config and quiet TensorFlow's logs first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kdist.compat import moved as _moved
from kdist.process import quiet as _quiet

__version__ = "0.9.0"

__all__ = ["ConfigError", "Experiment", "__version__", "compose", "data", "fit", "models"]

_LAZY = {
    "ConfigError": ("kdist.config.errors", "ConfigError"),
    "Experiment": ("kdist.experiment", "Experiment"),
    "compose": ("kdist.config.compose", "compose"),
    "data": ("kdist.data", None),
    "fit": ("kdist.quickfit", "fit"),
    "models": ("kdist.models", None),
}

# Before anything imports TensorFlow: level 2 by default (a run's runtime.tf_log_level
# replaces it), and the start-up lines that level cannot silence dropped (kdist.process.quiet).
_quiet.set_level(2)
_quiet.install()
# Old module paths (`kdist.sweep`, ...) import the modules that moved, with a warning.
_moved.install()

if TYPE_CHECKING:
    from kdist import data, models
    from kdist.config.compose import compose
    from kdist.config.errors import ConfigError
    from kdist.experiment import Experiment
    from kdist.quickfit import fit


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'kdist' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value
