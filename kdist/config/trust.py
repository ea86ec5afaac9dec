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

Trust is decided on the config as it will be instantiated, interpolations resolved: a
resolver can build a whole node (`${oc.decode:'{_target_: ...}'}`, `${oc.create:...}`),
so a tree checked as written (`resolve=False`) is not the tree that runs. A file read
back from a folder is resolved with `SAFE_RESOLVERS` only (`safe_resolvers`), those that
compute a value from the config itself and build no object, and every `_target_` of the
resolved tree is checked. Refused, naming the key: `oc.env` (it copies the reader's
environment, secrets included, into a config someone else wrote), `hydra:` (the reader's
own Hydra state), and every resolver registered by other code (a user's `eval`, say).
`trusted_config` does all of it for any file kdist reads back (`best.yaml`, a search's
state); YAML files are read within `kdist.config.yaml_limits`.

A trusted target may still write where it is told (`Curves(path=...)`,
`EpochTensorBoard(log_dir=...)`): each of its path arguments must resolve, links followed,
inside the run folder the file belongs to (`kdist.config.trust_paths`), or it is refused
in one line naming the key and the path.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, UnsupportedInterpolationType

from kdist.compat.keras_private import KERAS_DEFINITION_MODULES, KERAS_UNTRUSTED_DEFINITIONS
from kdist.compat.moved import new_name
from kdist.compat.tools_private import resolvers_replaced
from kdist.config.errors import ConfigError
from kdist.config.trust_paths import check_target_paths
from kdist.config.yaml_limits import load_config

__all__ = [
    "REFUSED_RESOLVERS",
    "SAFE_RESOLVERS",
    "TRUSTED_PREFIXES",
    "TRUST_FLAG",
    "check_trusted_targets",
    "resolve_untrusted",
    "safe_resolvers",
    "trusted_config",
    "trusted_target",
]

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
    "kdist.callbacks.guards.save_on_ctrl_c",
)
# The resolvers a file read back from a folder may use: each computes a value from the
# config itself (`oc.select`, `oc.dict.*`, `oc.deprecated`: another key's value; `oc.decode`,
# `oc.create`: a node parsed from a string, whose `_target_`s are checked once resolved) or
# from the clock and Python (Hydra's `now`, `python_version`). None builds an object.
SAFE_RESOLVERS = (
    "oc.select",
    "oc.dict.keys",
    "oc.dict.values",
    "oc.deprecated",
    "oc.decode",
    "oc.create",
    "now",
    "python_version",
)
# Registered by OmegaConf and Hydra and refused in such a file, with why (the message says
# it); any other resolver (registered by user code) is refused as unknown.
REFUSED_RESOLVERS = {
    "oc.env": "copies the reader's environment variables (secrets included) into the config",
    "hydra": "reads the reading process's own Hydra state",
}
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


@contextlib.contextmanager
def safe_resolvers() -> Iterator[None]:
    """Within the block, OmegaConf resolves interpolations with `SAFE_RESOLVERS` only.

    Every other resolver raises `UnsupportedInterpolationType` (turned into one line by
    `resolve_untrusted` and `check_trusted_targets`). The registry is process-wide: the
    block holds a lock, and the full registry is back when it ends, however it ends.
    """
    with resolvers_replaced(SAFE_RESOLVERS):
        yield


def _resolver_error(key: str, error: OmegaConfBaseException, source: str) -> ConfigError:
    full_key = getattr(error, "full_key", None) or key
    if isinstance(error, UnsupportedInterpolationType):
        text = str(error).splitlines()[0]
        name = text.rsplit(" ", 1)[-1].strip("'\"") if "type" in text else text
        why = REFUSED_RESOLVERS.get(name, "is not one kdist resolves in a file it reads back")
        return ConfigError(
            str(full_key),
            f"in {source} uses the resolver '{name}', which {why}; "
            f"allowed: {', '.join(SAFE_RESOLVERS)}",
            hint=f"pass {TRUST_FLAG}=true if you trust whoever wrote this run folder",
        )
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return ConfigError(
        str(full_key), f"in {source} has an interpolation that does not resolve: {first}"
    )


def _walk(node: Any, key: str, exempt: tuple[str, ...], found: list[tuple[str, Any]]) -> None:
    """Collect `(key, _target_)` of `node`, each interpolation resolved on the way."""
    if any(key == e or key.startswith(f"{e}.") or key.startswith(f"{e}[") for e in exempt):
        return
    if isinstance(node, DictConfig):
        for name in node:
            path = f"{key}.{name!s}" if key else str(name)
            if OmegaConf.is_missing(node, name):
                continue
            value = node[name]
            if name == "_target_":
                if not any(path == e or path.startswith(f"{e}.") for e in exempt):
                    found.append((path, value))
            else:
                _walk(value, path, exempt, found)
    elif isinstance(node, ListConfig):
        for i in range(len(node)):
            if OmegaConf.is_missing(node, i):
                continue
            _walk(node[i], f"{key}[{i}]", exempt, found)
    elif isinstance(node, dict):
        for name, value in node.items():
            path = f"{key}.{name}" if key else str(name)
            if name == "_target_":
                found.append((path, value))
            else:
                _walk(value, path, exempt, found)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _walk(value, f"{key}[{i}]", exempt, found)


def _leftover_interpolation(node: Any, key: str = "") -> str | None:
    """The first key whose resolved string would read as an interpolation again."""
    if isinstance(node, dict):
        for name, value in node.items():
            hit = _leftover_interpolation(value, f"{key}.{name}" if key else str(name))
            if hit:
                return hit
    elif isinstance(node, list):
        for i, value in enumerate(node):
            hit = _leftover_interpolation(value, f"{key}[{i}]")
            if hit:
                return hit
    elif isinstance(node, str) and "${" in node:
        return key or "(root)"
    return None


def resolve_untrusted(cfg: DictConfig | ListConfig, *, source: str) -> DictConfig | ListConfig:
    """`cfg` with every interpolation resolved by `SAFE_RESOLVERS`: a plain config.

    What it returns holds no interpolation left for a later resolver (one that could
    build an object) to compute: a resolved string that would read as an interpolation
    again (an escaped `\\${...}`) is refused.

    Args:
        cfg: a config read from a file of an untrusted folder.
        source: the file or folder, for the message.

    Returns:
        A new config with the same values, interpolations resolved.

    Raises:
        ConfigError: naming the key of an interpolation through another resolver, one
            that does not resolve, or a resolved value that is an interpolation again.
    """
    with safe_resolvers():
        try:
            container = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
        except OmegaConfBaseException as error:
            raise _resolver_error("", error, source) from None
    leftover = _leftover_interpolation(container)
    if leftover is not None:
        raise ConfigError(
            leftover,
            f"in {source} resolves to a string holding an interpolation ('${{'), which kdist "
            "does not resolve twice in a file it reads back",
            hint=f"pass {TRUST_FLAG}=true if you trust whoever wrote this run folder",
        )
    return OmegaConf.create(container)


def trusted_config(
    path_or_cfg: str | os.PathLike[str] | DictConfig | ListConfig,
    *,
    source: str | None = None,
    key: str = "run_dir",
    exempt: tuple[str, ...] = (),
    run_dir: str | os.PathLike[str] | None = None,
) -> DictConfig | ListConfig:
    """A config read back from a folder, as it will be instantiated, once trusted.

    The one door for every YAML file kdist reads back from a folder someone else may have
    written (a run's `.hydra/config.yaml`, `best.yaml`, a search's stored config): the file
    is read within `kdist.config.yaml_limits`, its interpolations are resolved with
    `SAFE_RESOLVERS` only (`resolve_untrusted`), and every `_target_` of the resolved tree
    must name a building block whose path arguments stay in `run_dir`
    (`check_trusted_targets`).

    Args:
        path_or_cfg: the file, or a config already read from one.
        source: the file or folder, for messages. Defaults to `None`: the path.
        key: the argument that named the file, for size and alias errors. Defaults to
            `"run_dir"`.
        exempt: dotted keys set by the user on their own command line (their targets
            are theirs). Defaults to `()`.
        run_dir: the run folder the file belongs to, where a target's path arguments
            must point. Defaults to `None`: no path argument is accepted.

    Returns:
        The resolved config: no interpolation left in it.

    Raises:
        ConfigError: naming the key at fault (or `key` for a file over the limits).

    Example:

    ```python
    best = trusted_config("outputs/search/best.yaml")
    ```
    """
    if isinstance(path_or_cfg, (DictConfig, ListConfig)):
        cfg, where = path_or_cfg, source or "the config"
    else:
        where = source or str(path_or_cfg)
        cfg = load_config(Path(path_or_cfg), key=key)
    resolved = resolve_untrusted(cfg, source=where)
    check_trusted_targets(resolved, source=where, exempt=exempt, run_dir=run_dir)
    return resolved


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
    cfg: DictConfig | ListConfig | dict[str, Any],
    *,
    source: str,
    exempt: tuple[str, ...] = (),
    run_dir: str | os.PathLike[str] | None = None,
) -> None:
    """Refuse a config read from a file when a `_target_` names code outside the allow-list,
    or a path argument of one points outside the run folder.

    Interpolations are resolved with `SAFE_RESOLVERS` only, as they will be when the
    config is instantiated; an interpolation through another resolver is refused too.
    Each path argument of a target that writes (`kdist.config.trust_paths`) must resolve,
    links followed, inside `run_dir`.

    Args:
        cfg: the config read from `source`.
        source: the file or folder it was read from, for the message.
        exempt: dotted keys the user set on the command line (their own targets, and
            everything under them, are trusted). Defaults to `()`.
        run_dir: the run folder the file belongs to. Defaults to `None`: none is known,
            and no path argument of a writing target is accepted.

    Raises:
        ConfigError: naming the first key whose `_target_` is not trusted, its value and
            the flag that allows it; the key of an interpolation through a resolver
            outside `SAFE_RESOLVERS`; or the key and value of a path argument outside
            `run_dir`.
    """
    found: list[tuple[str, Any]] = []
    # Resolved as they will be when instantiated, with the safe resolvers only: a
    # resolver may build a node with a `_target_` (`oc.decode`, `oc.create`).
    with safe_resolvers():
        try:
            _walk(cfg, "", exempt, found)
        except OmegaConfBaseException as error:
            raise _resolver_error("", error, source) from None
    for key, target in found:
        if trusted_target(target):
            continue
        raise ConfigError(
            key,
            f"in {source} names code outside kdist's and Keras's building blocks, which "
            "reading a run folder does not run",
            value=target,
            hint=f"pass {TRUST_FLAG}=true if you trust whoever wrote this run folder",
        )
    plain: Any = cfg
    if isinstance(cfg, (DictConfig, ListConfig)):
        with safe_resolvers():
            try:
                plain = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
            except OmegaConfBaseException as error:
                raise _resolver_error("", error, source) from None
    check_target_paths(
        plain if isinstance(plain, (dict, list)) else {},
        source=source,
        run_dir=run_dir,
        exempt=exempt,
        hint=f"pass {TRUST_FLAG}=true if you trust whoever wrote this run folder",
    )
