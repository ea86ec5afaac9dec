"""kdist: train Keras 3 models under any tf.distribute strategy by changing one word of config.

The package imports TensorFlow only when an attribute that needs it is first used, so
`kdist train` can check the config and quiet TensorFlow's logs first.

Importing kdist changes nothing in the process: no environment variable, no import hook,
no stderr filter (one exception: as the package of `python -m kdist.<command>`, it makes a
Ctrl-C that lands in the command's own imports one line, `kdist.process.interrupt`).
The commands (`kdist train`, ...) turn TensorFlow's logs down themselves;
in a notebook, `kdist.quiet_tensorflow()` does the same (an `Experiment` applies its config's
`runtime.tf_log_level`).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from kdist.compat.moved import MOVED as _MOVED

if sys.argv[:1] == ["-m"]:  # Python is locating `python -m kdist.<command>`: its imports follow
    from kdist.process.interrupt import one_line_on_ctrl_c_while_starting

    one_line_on_ctrl_c_while_starting()

__version__ = "0.9.0"

__all__ = [
    "ConfigError",
    "Experiment",
    "__version__",
    "compose",
    "data",
    "fit",
    "models",
    "quiet_tensorflow",
    "tune",
]

_LAZY = {
    "ConfigError": ("kdist.config.errors", "ConfigError"),
    "Experiment": ("kdist.experiment", "Experiment"),
    "compose": ("kdist.config.compose", "compose"),
    "data": ("kdist.data", None),
    "fit": ("kdist.quickfit", "fit"),
    "models": ("kdist.models", None),
    # `kdist.tune.best_config(...)` and `kdist.tune.search(...)` after `import kdist` alone,
    # as the docs show; `kdist.tune` imports Hydra but not TensorFlow. Named here only (not
    # imported for type checkers): the command sits a layer above the package.
    "tune": ("kdist.tune", None),
}


def quiet_tensorflow(level: int = 2) -> None:
    """Turn TensorFlow's C++ logs down, as the `kdist` commands do; call it before TensorFlow
    is imported (TensorFlow reads its level once).

    It sets `TF_CPP_MIN_LOG_LEVEL` (unless it is set already: the user's value wins) and,
    at level 1 or more, drops the start-up lines that the variable cannot silence
    (`kdist.process.quiet`).

    Args:
        level: 0 all, 1 no INFO, 2 no WARNING, 3 no ERROR. Defaults to `2`.

    Example:

    ```python
    import kdist
    kdist.quiet_tensorflow()
    import tensorflow as tf
    ```
    """
    from kdist.process import runtime

    runtime.quiet_tensorflow(level)


if TYPE_CHECKING:
    from kdist import data, models
    from kdist.config.compose import compose
    from kdist.config.errors import ConfigError
    from kdist.experiment import Experiment
    from kdist.quickfit import fit


def __getattr__(name: str) -> Any:
    if f"kdist.{name}" in _MOVED:
        # `kdist.sweep` (a module that moved) read as an attribute: the same module, with
        # the moved-path warning, and no import hook (the commands install one).
        from kdist.compat import moved

        return moved.load(f"kdist.{name}", stacklevel=3)
    if name not in _LAZY:
        raise AttributeError(f"module 'kdist' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value
