"""What the reference pages are made from: the YAML of `conf/`, the schemas, docstrings.

A key's description comes from, in order, the comment beside or above it in the YAML,
the comment beside or above the field in the schema, and the `Args:` entry of the kdist
callable the node names.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.resources
import inspect
import re
from collections.abc import Iterator
from importlib.resources.abc import Traversable
from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = [
    "conf_root",
    "config_groups",
    "docstring_args",
    "kdist_callable",
    "paragraphs",
    "prose",
    "schema_comments",
    "schema_for",
    "yaml_comments",
]

_KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w.]*)\s*:(?P<rest>.*)$")
_FIELD_LINE = re.compile(r"^\s+(?P<key>[A-Za-z_]\w*)\s*:\s*[^=]+?(=.*)?$")


def prose(text: str) -> str:
    """`text` for Markdown: `<name>` outside backticks would be read as an HTML tag."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def conf_root() -> Traversable:
    return importlib.resources.files("kdist.conf")


def config_groups(root: Traversable, prefix: str = "") -> Iterator[tuple[str, Traversable]]:
    """Every folder under `root` that holds YAML files, as (group path, folder)."""
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.is_dir() and not entry.name.startswith(("_", ".")):
            group = f"{prefix}{entry.name}"
            if any(child.name.endswith(".yaml") for child in entry.iterdir()):
                yield group, entry
            yield from config_groups(entry, prefix=f"{group}/")


def _split_comment(rest: str) -> tuple[str, str]:
    """`value  # comment` -> (value, comment); a `#` inside quotes is not a comment."""
    quote = None
    for i, char in enumerate(rest):
        if char in "'\"":
            quote = None if quote == char else (quote or char)
        elif char == "#" and quote is None and (i == 0 or rest[i - 1].isspace()):
            return rest[:i].strip(), rest[i + 1 :].strip()
    return rest.strip(), ""


def yaml_comments(text: str) -> tuple[list[str], dict[str, str]]:
    """The file's header comment lines and a comment per dotted key (beside or above it)."""
    header: list[str] = []
    comments: dict[str, str] = {}
    above: list[str] = []
    stack: list[tuple[int, str]] = []
    seen_key = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if seen_key:
                above.append(stripped.lstrip("#").strip())
            else:
                # One space after `#` is the comment's margin; more is indentation.
                header.append(stripped[1:].removeprefix(" ").rstrip())
            continue
        if not stripped:
            above = []
            continue
        match = _KEY_LINE.match(line)
        if not match or stripped.startswith("-"):
            above = []
            continue
        seen_key = True
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = ".".join([*(k for _, k in stack), match["key"]])
        stack.append((indent, match["key"]))
        _, beside = _split_comment(match["rest"])
        text_above = " ".join(a for a in above if a)
        if beside or text_above:
            comments[key] = " ".join(p for p in (text_above, beside) if p)
        above = []
    return header, comments


def paragraphs(header: list[str]) -> list[str]:
    """Header comment lines as Markdown: indented lines (commands) become code blocks."""
    lines: list[str] = []
    code = False
    for line in header:
        indented = line.startswith("  ")
        if indented and not code:
            lines += ["", "```bash"]
        elif not indented and code:
            lines += ["```", ""]
        code = indented
        lines.append(line.strip() if indented else prose(line))
    if code:
        lines.append("```")
    return [*lines, ""] if lines else []


def schema_comments(cls: type) -> dict[str, str]:
    """A comment per field of a dataclass (and of the dataclasses it extends): beside the
    field, or the lines above it."""
    comments: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if base is not cls and dataclasses.is_dataclass(base):
            comments.update(schema_comments(base))
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return comments
    above: list[str] = []
    for line in source.splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        match = _FIELD_LINE.match(line)
        if match and not stripped.startswith(("def ", "@", '"""')):
            _, beside = _split_comment(line.split(":", 1)[1])
            text = " ".join(p for p in (" ".join(above), beside) if p)
            if text:
                comments[match["key"]] = text
        above = []
    return comments


def docstring_args(target: Any) -> dict[str, str]:
    """The `Args:` entries of a Keras-style docstring, joined to one line each."""
    doc = inspect.getdoc(target) or ""
    args: dict[str, str] = {}
    inside = False
    current = None
    for line in doc.splitlines():
        if line.strip() in ("Args:", "Arguments:"):
            inside = True
            continue
        if not inside:
            continue
        if line and not line.startswith(" "):
            break  # the next section (Returns:, Raises:, ...)
        match = re.match(r"^ {4}(\*{0,2}\w+)(?: \(.*?\))?:\s*(.*)$", line)
        if match:
            current = match[1].lstrip("*")
            args[current] = match[2].strip()
        elif current and line.strip():
            args[current] += " " + line.strip()
    # The default column shows the option's own default, which may differ from the
    # callable's: drop the docstring's "Defaults to ..." sentence.
    return {k: re.sub(r"\s*Defaults to .*$", "", v).strip() for k, v in args.items()}


def kdist_callable(path: Any) -> Any:
    """The callable a `_target_` names, when it is kdist's own (its docs are ours)."""
    if not isinstance(path, str) or not path.startswith("kdist."):
        return None
    module_name, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError):
        return None


def schema_for(group: str, option_text: str) -> type | None:
    """The dataclass an option's `defaults` list starts from (`base_<option>`)."""
    from hydra.core.config_store import ConfigStore

    from kdist.config.schema import register

    register()
    loaded = OmegaConf.create(option_text) if option_text.strip() else OmegaConf.create()
    defaults = loaded.get("defaults") if isinstance(loaded, DictConfig) else None
    for entry in defaults or []:
        if isinstance(entry, str) and entry.startswith("base_"):
            repo = ConfigStore.instance().repo
            node = repo.get(group, {}).get(f"{entry}.yaml") if group else None
            node = node or repo.get(f"{entry}.yaml")
            if node is not None:
                kind = OmegaConf.get_type(node.node)
                return kind if dataclasses.is_dataclass(kind) else None
    return None
