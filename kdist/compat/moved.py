"""Module paths that moved in kdist 0.10, importable by their old names for one release.

README snippets, notebooks and saved configs (`_target_: kdist.sweep.SummaryCallback`)
name modules that now live in packages (`kdist.runs.sweep`). `install()` puts one finder on
`sys.meta_path` that answers only for the old names in `MOVED`: importing one imports the
new module, warns once with a `DeprecationWarning` naming the new path, and binds the old
name to the very same module object, so
`kdist.sweep.SummaryCallback is kdist.runs.sweep.SummaryCallback`.

`import kdist` does not install it (importing kdist changes nothing in the process): the
command-line entry points do (`kdist.process.log_level.prepare_command`), and so do
`kdist.compose` and `kdist.config.instantiate`, which read configs that may name an old
path. `kdist.sweep` read as an attribute of `kdist` loads the module without the finder
(`load`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

__all__ = ["MOVED", "install", "installed", "load", "new_name"]

# Old dotted path -> new dotted path (also in /docs/architecture.md's "Moved" table).
MOVED: dict[str, str] = {
    "kdist.quiet": "kdist.process.quiet",
    "kdist.runtime": "kdist.process.runtime",
    "kdist.exit_codes": "kdist.process.exit_codes",
    "kdist.cli": "kdist.process.log_level",
    "kdist.run_dir": "kdist.runs.layout",
    "kdist.run_lock": "kdist.runs.lock",
    "kdist.resume_check": "kdist.runs.resume_check",
    "kdist.fileio": "kdist.runs.fileio",
    "kdist.sweep": "kdist.runs.sweep",
    "kdist.plots": "kdist.runs.plots",
    "kdist.sidecar": "kdist.evaluation.sidecar",
    "kdist.predicting": "kdist.experiment.predicting",
    "kdist.supervisor": "kdist.launcher.supervisor",
    "kdist.launch_tasks": "kdist.launcher.tasks",
    "kdist.launch_checks": "kdist.launcher.checks",
    "kdist.elastic": "kdist.launcher.elastic",
    "kdist.sandbox": "kdist.launcher.sandbox",
    "kdist.gpus": "kdist.launcher.gpus",
    "kdist.batch_plan": "kdist.experiment.run_data",
    "kdist.optimizers": "kdist.modeling.optimizers",
    "kdist.schedules": "kdist.modeling.schedules",
    "kdist.lazy_optimizers": "kdist.modeling.lazy_optimizers",
    "kdist.compiling": "kdist.modeling.compiling",
    "kdist.objective": "kdist.config.objective",
    "kdist.outputs": "kdist.experiment.outputs",
    "kdist.export": "kdist.evaluation.export",
    "kdist.data.tfrecord_io": "kdist.data.tfrecords",
    "kdist.callbacks.checkpoint": "kdist.engine.checkpoint",
    # kdist 0.11: the Experiment's own helpers live in its package.
    "kdist.modeling.build": "kdist.experiment.build",
    "kdist.modeling.batch_plan": "kdist.experiment.run_data",
    "kdist.runs.outputs": "kdist.experiment.outputs",
    "kdist.evaluation.predicting": "kdist.experiment.predicting",
    # kdist 0.12 (issue 51): small modules joined to the one their run path enters anyway.
    "kdist.callbacks.speed": "kdist.callbacks.tensorboard",
    "kdist.callbacks.profile": "kdist.callbacks.tensorboard",
    "kdist.callbacks.run_epochs": "kdist.callbacks.curves",
    "kdist.callbacks.cluster_speed": "kdist.callbacks.progress",
    "kdist.callbacks.preemption": "kdist.callbacks.guards",
    "kdist.callbacks.batch_hooks": "kdist.engine.runner",
    "kdist.engine.call_gate": "kdist.engine.checkpoint.host_copies",
    "kdist.engine.checkpoint.compatibility": "kdist.engine.checkpoint.host_copies",
    "kdist.config.build": "kdist.config.targets",
    "kdist.compat.keras_loop": "kdist.compat.keras_private",
    "kdist.experiment.batch_plan": "kdist.experiment.run_data",
    "kdist.experiment.compile_state": "kdist.experiment.binding",
}


def new_name(name: str) -> str:
    """The module path `name` moved to (`name` itself when it did not move).

    Args:
        name: a dotted module path, e.g. `kdist.runs.sweep`.

    Returns:
        The path of the module now importable as `name`, e.g. `kdist.runs.sweep`.
    """
    return MOVED.get(name, name)


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new path (the same object)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return types.ModuleType(spec.name)  # replaced in `exec_module`

    def exec_module(self, module: types.ModuleType) -> None:
        load(module.__name__, stacklevel=3)


def load(old: str, *, stacklevel: int = 2) -> types.ModuleType:
    """The module that moved from `old`, bound to the old name too; warns once.

    Args:
        old: an old dotted path, a key of `MOVED`.
        stacklevel: where the warning points, as in `warnings.warn`. Defaults to `2`.

    Returns:
        The module at `MOVED[old]` (the same object under both names).
    """
    new = MOVED[old]
    if sys.modules.get(old) is not None and sys.modules[old].__name__ == new:
        return sys.modules[old]
    warnings.warn(
        f"{old} moved to {new}; import {new} (the old path goes in the next release)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    module = importlib.import_module(new)
    # The import system returns whatever `sys.modules` holds under the old name.
    sys.modules[old] = module
    return module


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old names in `MOVED`, and nothing else."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias())


_FINDER = _MovedFinder()


def install() -> None:
    """Put the finder of old module paths on `sys.meta_path` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def installed() -> bool:
    """Whether the finder of old module paths is on `sys.meta_path`."""
    return _FINDER in sys.meta_path
