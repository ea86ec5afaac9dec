"""Which callables a run folder's config may name when kdist reads it back.

`kdist.evaluate run_dir=X`, `kdist.predict` and the sidecar evaluator rebuild the
strategy, data and metrics from `X/.hydra/config.yaml`. A run folder can come from
anyone, and Hydra's `instantiate` calls whatever importable callable a `_target_` names,
so a config read from a folder is rebuilt only from kdist's and Keras's building blocks
unless the user says the folder is trusted (`trust_run_dir=true`).

Trust is decided on the object a `_target_` resolves to, not on its spelling: the dotted
path is walked as Hydra's `_locate` walks it, every step before the last must be a module
of that very name (or the module an old name moved to, `kdist.compat.moved`; never a
module reached as an attribute of another, such as `kdist.data.files.tf` or
`kdist.data.csv_source.os`), and the object found must be a public class or function
*defined* in one of kdist's or Keras's building-block modules (`TRUSTED_PREFIXES`,
`TRUSTED_DEFINITIONS`). Only paths that start with a trusted prefix are imported at all.
Every `_target_` of the tree is checked: nested ones, those under `_args_`, and
`_partial_` ones.
"""

from __future__ import annotations

import importlib
import inspect
import types
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from kdist.compat.keras_private import KERAS_DEFINITION_MODULES, KERAS_UNTRUSTED_DEFINITIONS
from kdist.compat.moved import new_name
from kdist.config.errors import ConfigError

__all__ = ["TRUSTED_PREFIXES", "TRUST_FLAG", "check_trusted_targets", "trusted_target"]

TRUST_FLAG = "trust_run_dir"

# How a target may be spelled: the modules whose callables only build training objects.
# Not `keras.utils` (`get_file` downloads and extracts), `keras.models`/`keras.saving`
# (loaders), `keras.config`.
TRUSTED_PREFIXES = (
    "kdist.strategies.",
    "kdist.models.",
    "kdist.data.",
    "kdist.modeling.optimizers.",
    "kdist.modeling.schedules.",
    "kdist.callbacks.",
    "kdist.tuning.oracles.",
    "kdist.modeling.lazy_optimizers.",
    # Their paths before kdist 0.10 (`kdist.compat.moved`), as saved configs spell them.
    "kdist.optimizers.",
    "kdist.schedules.",
    "kdist.lazy_optimizers.",
    "keras.losses.",
    "keras.metrics.",
    "keras.optimizers.",
    "keras.layers.",
    "keras.initializers.",
    "keras.regularizers.",
    "keras.activations.",
    "keras.callbacks.",
)
# Where the object found must be defined (its `__module__`, or a module under it): Keras's
# public names are re-exports of definitions in Keras's private modules
# (`kdist.compat.keras_private.KERAS_DEFINITION_MODULES`).
TRUSTED_DEFINITIONS = (
    "kdist.strategies",
    "kdist.models",
    "kdist.data",
    "kdist.modeling.optimizers",
    "kdist.modeling.schedules",
    "kdist.callbacks",
    "kdist.tuning.oracles",
    "kdist.modeling.lazy_optimizers",
    *KERAS_DEFINITION_MODULES,
)
# Inside a trusted module, still not: they send metrics to a URL, or write or delete
# files at a path they are given when a run uses them.
UNTRUSTED = (
    *KERAS_UNTRUSTED_DEFINITIONS,
    "kdist.callbacks.preemption.save_on_ctrl_c",
)
# Nor callables that write or fetch files (`kdist.data.write_tfrecords`, ...).
UNTRUSTED_VERBS = ("write", "save", "export", "remove", "delete", "download", "load_model")


def _defined_in_trusted_module(module: str) -> bool:
    return any(module == m or module.startswith(f"{m}.") for m in TRUSTED_DEFINITIONS)


def _resolve(target: str) -> Any:
    """The object `target` names, walked as Hydra's `_locate` walks it; `None` if refused.

    Refused: a step before the last that is not a module of exactly that dotted name
    (a module imported by another module, a class, an instance, ...).
    """
    parts = target.split(".")
    if any(not part or part.startswith("_") for part in parts):
        return None  # private names, relative or malformed paths
    obj: Any = importlib.import_module(parts[0])
    for depth in range(1, len(parts)):
        name = ".".join(parts[:depth])
        # A module that moved is the same object under its old name (`kdist.compat.moved`).
        if not isinstance(obj, types.ModuleType) or obj.__name__ != new_name(name):
            return None
        try:
            obj = getattr(obj, parts[depth])
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: depth + 1]))
    return obj


def trusted_target(target: Any) -> bool:
    """Whether `target` (a `_target_` value) names a kdist or Keras building block.

    Args:
        target: the value of a `_target_` key.

    Returns:
        `True` only for a dotted path spelled under `TRUSTED_PREFIXES` that resolves,
        through modules of the same names, to a public class or function defined in
        `TRUSTED_DEFINITIONS`, not listed in `UNTRUSTED` and not named like a writer.
    """
    if not isinstance(target, str) or not target.startswith(TRUSTED_PREFIXES):
        return False  # nothing outside kdist and Keras is imported to find out
    try:
        obj = _resolve(target)
    except Exception:  # an import error: not a building block (and nothing to call)
        return False
    if obj is None or not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return False
    module, name = getattr(obj, "__module__", None), getattr(obj, "__name__", "")
    if not isinstance(module, str) or not _defined_in_trusted_module(module):
        return False
    if name != target.rsplit(".", 1)[-1] or name.startswith("_"):
        return False  # an alias: the object is not what its name says
    qualified = f"{module}.{getattr(obj, '__qualname__', name)}"
    return qualified not in UNTRUSTED and not name.lower().startswith(UNTRUSTED_VERBS)


def _targets(node: Any, key: str = "") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for name, value in node.items():
            path = f"{key}.{name}" if key else str(name)
            if name == "_target_":
                found.append((path, value))
            else:
                found.extend(_targets(value, path))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(_targets(value, f"{key}[{i}]"))
    return found


def check_trusted_targets(
    cfg: DictConfig | ListConfig | dict[str, Any], *, source: str, exempt: tuple[str, ...] = ()
) -> None:
    """Refuse a config read from a file when a `_target_` names code outside the allow-list.

    Args:
        cfg: the config read from `source`.
        source: the file or folder it was read from, for the message.
        exempt: dotted keys the user set on the command line (their own targets, and
            everything under them, are trusted). Defaults to `()`.

    Raises:
        ConfigError: naming the first key whose `_target_` is not trusted, its value and
            the flag that allows it.
    """
    container = (
        OmegaConf.to_container(cfg, resolve=False)
        if isinstance(cfg, (DictConfig, ListConfig))
        else cfg
    )
    for key, target in _targets(container):
        if any(key == e or key.startswith(f"{e}.") or key.startswith(f"{e}[") for e in exempt):
            continue
        if trusted_target(target):
            continue
        raise ConfigError(
            key,
            f"in {source} names code outside kdist's and Keras's building blocks, which "
            "reading a run folder does not run",
            value=target,
            hint=f"pass {TRUST_FLAG}=true if you trust whoever wrote this run folder",
        )
