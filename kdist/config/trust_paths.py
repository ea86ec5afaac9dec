"""Where a path argument of a trusted `_target_` may point: inside the run folder.

`kdist.config.trust` lets a file kdist did not write for this run (a run folder's config,
`best.yaml`, a search's settings) name kdist's and Keras's building blocks, and several of
them write where they are told: `Curves(path=...)`, `EpochTensorBoard(log_dir=...)`,
`BestModelExport(directory=...)`, `PreemptionSave(run_dir=...)`, ... A planted
`callbacks.extra` would make them write anywhere the reader can. So every argument of a
trusted target whose name says it is a path (`path_parameters`: a word of its name is
`path`, `dir`, `file`, `folder`, ...; found from the signature, so a new writer is covered
the day it is added; a keyword its `**kwargs` pass on to a base, and every other keyword
whose name says it is a path, are held the same way) must resolve, links followed and
`..` applied, inside the run folder the file belongs to, or the target is refused in one
line naming the key and the path.

The data sources (`kdist.data`, `READ_ONLY`) only read their paths (the dataset lives
wherever it lives; they never download and never write); their writers (`write_tfrecords`)
are refused by `kdist.config.trust` already.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kdist.compat.tools_private import hydra_locate
from kdist.config.errors import ConfigError

__all__ = ["PATH_WORDS", "READ_ONLY", "check_target_paths", "path_parameters", "writes_paths"]

# A parameter is a path when one of the words of its name (split at `_`) is one of these.
PATH_WORDS = frozenset(
    {"path", "paths", "dir", "dirs", "directory", "file", "files", "filename", "filepath"}
    | {"folder", "root", "logdir", "url", "uri", "location"}
)
# Modules whose callables only read their paths: the data sources.
READ_ONLY = ("kdist.data",)
_WORD = re.compile(r"[a-z]+")


def _is_path_name(name: str) -> bool:
    return any(word in PATH_WORDS for word in _WORD.findall(name.lower()))


def _signature(target: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):
        return None


def _takes(target: Callable[..., Any], kind: object) -> bool:
    signature = _signature(target)
    return signature is not None and any(p.kind == kind for p in signature.parameters.values())


def path_parameters(target: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters of `target` whose names say they are paths, in signature order.

    A class whose constructor takes `**kwargs` passes them on to its bases (`RunCurves`
    to `Curves`): the path parameters of every constructor in its method resolution
    order are its own too, however many `**kwargs` they pass through.

    Args:
        target: a class (its constructor's parameters) or a function.

    Returns:
        Their names (`()` when there is no signature to read).
    """
    signature = _signature(target)
    if signature is None:
        return ()
    names = [
        name
        for name, p in signature.parameters.items()
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and _is_path_name(name)
    ]
    if inspect.isclass(target) and _takes(target, inspect.Parameter.VAR_KEYWORD):
        for base in target.__mro__[1:]:
            init = base.__dict__.get("__init__")
            if init is None or base is object:
                continue
            names.extend(n for n in path_parameters(init) if n not in names and n != "self")
    return tuple(names)


def writes_paths(target: Callable[..., Any]) -> bool:
    """Whether the path arguments of `target` are held to the run folder (not a reader's)."""
    module = getattr(target, "__module__", "") or ""
    return not any(module == m or module.startswith(f"{m}.") for m in READ_ONLY)


def _inside(value: str, folder: Path) -> bool:
    """Whether `value`, opened from this process's folder, lands inside `folder`."""
    if "://" in value:
        return False  # a remote file system is no local run folder
    where = os.path.realpath(os.path.join(os.getcwd(), value))  # links followed, `..` applied
    root = os.path.realpath(folder)
    return where == root or where.startswith(root.rstrip(os.sep) + os.sep)


def _given(target: Callable[..., Any], node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """`(argument, value)` of each argument of `node` that may reach a path parameter.

    By name: a path parameter of `target` or of a base its `**kwargs` reach, and any
    other key whose name says it is a path (`**kwargs` keep their names wherever they are
    passed on). By position (`_args_`): one that lands on a path parameter, and every one
    that lands in `*args` (passed on, it may land on a path anywhere).
    """
    names = path_parameters(target)
    signature = _signature(target)
    parameters = list(signature.parameters.values()) if signature is not None else []
    if parameters and parameters[0].name == "self":
        parameters = parameters[1:]
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    args = node.get("_args_") or []
    for i, value in enumerate(args if isinstance(args, list) else []):
        # Past the positional parameters, it goes to `*args` (or the call fails anyway).
        if i >= len(positional) or positional[i].name in names:
            yield f"_args_[{i}]", value
    for name, value in node.items():
        if not str(name).startswith("_") and (name in names or _is_path_name(str(name))):
            yield str(name), value


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, (str, os.PathLike)):
        yield os.fspath(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _nodes(node: Any, key: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if "_target_" in node:
            yield key, node
        for name, value in node.items():
            yield from _nodes(value, f"{key}.{name}" if key else str(name))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _nodes(value, f"{key}[{i}]")


def check_target_paths(
    plain: dict[str, Any] | list[Any],
    *,
    source: str,
    run_dir: str | os.PathLike[str] | None,
    exempt: tuple[str, ...] = (),
    hint: str,
) -> None:
    """Refuse a path argument of a writing target that points outside `run_dir`.

    Call it once every `_target_` of the config is trusted (`kdist.config.trust`, which
    calls it): it imports the targets it names.

    Args:
        plain: the config read from `source`, as plain containers, interpolations
            resolved (by the safe resolvers only).
        source: the file or folder it was read from, for the message.
        run_dir: the run folder the file belongs to; `None` when none is known yet (then
            no path argument is accepted).
        exempt: dotted keys the user set on the command line (theirs). Defaults to `()`.
        hint: what lifts the check, for the message.

    Raises:
        ConfigError: naming the first key of a path argument that resolves outside
            `run_dir` (links followed), with the path.
    """
    for key, node in _nodes(plain):
        if any(key == e or key.startswith((f"{e}.", f"{e}[")) for e in exempt):
            continue
        target = node.get("_target_")
        try:
            obj = hydra_locate(target) if isinstance(target, str) else None
        except Exception:  # not importable: the trust check refused it already
            obj = None
        if obj is None or not writes_paths(obj):
            continue
        for name, value in _given(obj, node):
            for path in _strings(value):
                if run_dir is not None and _inside(path, Path(run_dir)):
                    continue
                if run_dir is None:
                    problem = (
                        f"in {source} is a path {target} writes to, and no run folder is "
                        "given to hold it"
                    )
                else:
                    problem = (
                        f"in {source} points outside the run folder {run_dir} ({target} "
                        "writes there), which a file kdist did not write for this run may not do"
                    )
                raise ConfigError(
                    f"{key}.{name}" if key else name,
                    problem,
                    value=path,
                    hint=hint,
                )
