"""YAML files read with a size limit and an alias-expansion limit.

PyYAML shares the node an alias names, so a file of a few hundred bytes whose anchors
nest aliases of aliases (the "billion laughs") reads in no time; OmegaConf then copies
every shared node into its own tree, and a 488-byte file takes forever and all memory.
A 2 GB string is read whole before anything looks at it. So every YAML file kdist reads
from a user (a recipe folder given with `-cd DIR`) or from a run folder (`.hydra/*.yaml`,
`config.yaml`, `best.yaml`, a search's state) is checked first, and refused in one line
naming the file:

- more than `MAX_BYTES` bytes (checked from the file's size, before reading it);
- a document whose nodes, counted with every alias expanded as OmegaConf will expand it,
  number more than `MAX_NODES`, that nests deeper than `MAX_DEPTH`, or whose alias refers
  to the node that contains it.

The count walks PyYAML's composed node graph once, remembering each shared node's size,
so the check itself stays linear in the file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from kdist.config.errors import ConfigError

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "check_config_folder",
    "check_yaml_file",
    "check_yaml_text",
    "config_folder",
    "load_config",
    "load_yaml",
]

# Configs are kilobytes; a data set's YAML manifest a few megabytes at most.
MAX_BYTES = 8 * 2**20
# kdist's largest composed config has about 400 nodes; a tuner's state a few thousand.
MAX_NODES = 100_000
MAX_DEPTH = 200
# Files a config folder (`-cd DIR`) may hold that are checked; more is not a config folder.
MAX_FILES = 2000
MAX_FOLDER_DEPTH = 3


def _refuse(key: str, where: str, problem: str) -> ConfigError:
    return ConfigError(key, f"{where} {problem}", hint="kdist reads YAML files within these limits")


def _expanded_size(root: yaml.Node, *, key: str, where: str) -> int:
    """Nodes of `root` with every alias expanded; refuses cycles, depth and size."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        ident = id(node)
        if ident in sizes:
            return sizes[ident]
        if ident in open_nodes:
            raise _refuse(key, where, "holds an alias that refers to the node containing it")
        if depth > MAX_DEPTH:
            raise _refuse(key, where, f"nests deeper than {MAX_DEPTH} levels")
        total = 1
        if isinstance(node, yaml.CollectionNode):
            open_nodes.add(ident)
            children: list[yaml.Node] = []
            for item in node.value:
                children.extend(item if isinstance(item, tuple) else (item,))
            for child in children:
                total += size(child, depth + 1)
                if total > MAX_NODES:
                    raise _refuse(
                        key,
                        where,
                        f"expands to more than {MAX_NODES} nodes once its aliases are "
                        "expanded (an alias bomb?)",
                    )
            open_nodes.discard(ident)
        sizes[ident] = total
        return total

    return size(root, 0)


def check_yaml_text(text: str | bytes, *, key: str, where: str) -> None:
    """Refuse YAML text over the limits (`MAX_BYTES`, `MAX_NODES`, `MAX_DEPTH`).

    Args:
        text: the file's content.
        key: the argument or key that named the file, for the message.
        where: the file, for the message.

    Raises:
        ConfigError: naming `key` and `where` and the limit passed. YAML syntax errors
            are left to the reader that follows (it names the line).
    """
    if len(text) > MAX_BYTES:
        raise _refuse(key, where, f"is larger than {MAX_BYTES // 2**20} MiB")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's when built with it
    try:
        # The events first: a deep nesting is refused as soon as it is seen (composing
        # thousands of levels takes seconds).
        depth = 0
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _refuse(key, where, f"nests deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return  # not YAML: the reader says where
    limit = sys.getrecursionlimit()
    # The composer recurses once per level: room for MAX_DEPTH levels and the caller's stack.
    sys.setrecursionlimit(max(limit, 20 * MAX_DEPTH + 1000))
    try:
        for document in yaml.compose_all(text, Loader=loader):
            if document is not None:
                _expanded_size(document, key=key, where=where)
    except yaml.YAMLError:
        return  # not YAML: the reader says where
    except RecursionError:
        raise _refuse(key, where, f"nests deeper than {MAX_DEPTH} levels") from None
    finally:
        sys.setrecursionlimit(limit)


def check_yaml_file(path: str | os.PathLike[str], *, key: str) -> None:
    """Refuse a YAML file over the limits, its size first (before reading a byte).

    Raises:
        ConfigError: naming `key` and the file.
    """
    file = Path(path)
    try:
        if file.stat().st_size > MAX_BYTES:
            raise _refuse(key, str(file), f"is larger than {MAX_BYTES // 2**20} MiB")
        data = file.read_bytes()
    except OSError as error:
        raise ConfigError(key, f"cannot read {file} ({error.strerror or error})") from None
    check_yaml_text(data, key=key, where=str(file))


def _unreadable(key: str, path: str | os.PathLike[str], error: Exception) -> ConfigError:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return ConfigError(key, f"{path} does not read as a config ({first})")


def load_config(path: str | os.PathLike[str], *, key: str) -> DictConfig | ListConfig:
    """`OmegaConf.load(path)` once the file is within the limits.

    Raises:
        ConfigError: naming `key` and the file when it is over the limits, is not YAML,
            or holds an interpolation OmegaConf cannot parse.
    """
    check_yaml_file(path, key=key)
    try:
        return OmegaConf.load(Path(path))
    except (yaml.YAMLError, OmegaConfBaseException, UnicodeDecodeError) as error:
        raise _unreadable(key, path, error) from None


def load_yaml(path: str | os.PathLike[str], *, key: str) -> Any:
    """`yaml.safe_load` of the file once it is within the limits.

    Raises:
        ConfigError: naming `key` and the file when it is over the limits or not YAML.
    """
    check_yaml_file(path, key=key)
    try:
        return yaml.safe_load(Path(path).read_bytes())
    except yaml.YAMLError as error:
        raise _unreadable(key, path, error) from None


def check_config_folder(folder: str | os.PathLike[str], *, key: str) -> None:
    """Check the YAML files of a config folder (`-cd DIR`) before Hydra reads any.

    Hydra reads `NAME.yaml` and `group/option.yaml` files from it: the files up to
    `MAX_FOLDER_DEPTH` folders down are checked (hidden folders skipped), at most
    `MAX_FILES` of them.

    Raises:
        ConfigError: naming `key` and the first file over the limits.
    """
    root = Path(folder)
    if not root.is_dir():
        return  # the composer says it is not a folder
    checked = 0
    for current, dirs, files in os.walk(root):
        depth = len(Path(current).relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and depth < MAX_FOLDER_DEPTH)
        for name in sorted(files):
            if not name.endswith((".yaml", ".yml")):
                continue
            checked += 1
            if checked > MAX_FILES:
                return
            check_yaml_file(Path(current) / name, key=key)


def config_folder(config_path: str | None) -> str | None:
    """The folder of `--config-path`, when it is absolute (a relative one is Hydra's, relative
    to the app's module): composed and checked as `-cd` is, so that its files are within the
    limits and an error's search path names it."""
    return config_path if config_path and os.path.isabs(config_path) else None
