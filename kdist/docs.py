"""`python -m kdist.docs`: write `docs/`, a page per config group, from the configs themselves.

Every page is generated from `conf/` and the typed schemas in `kdist/config/schema.py`, so
it cannot drift from them: the keys and their defaults come from the option's YAML merged
over its schema, the types from the schema's annotations (or, under a `_target_` node,
from the callable's signature), and the descriptions from, in order, the comment beside
or above a key in the YAML, the comment beside or above the field in the schema, and the
`Args:` entry of the kdist callable the node names. A test checks that the committed
`docs/` equals what this module generates (`make docs` rewrites it).

It stays one file (over 400 lines): reading the configs, flattening an option and
rendering are private steps of one generator, whose public surface is `generate`,
`check`, `write` and `main`.

Example:

```bash
python -m kdist.docs              # rewrite docs/
python -m kdist.docs --check      # exit 1 and name the stale pages if docs/ is out of date
```
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.resources
import inspect
import re
import sys
import typing
from collections.abc import Iterator, Mapping
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from kdist.config.constants import HYDRA_KEYS
from kdist.config.groups import GROUP_INTROS
from kdist.process.exit_codes import EXIT_FAILED

__all__ = ["check", "generate", "main", "write"]

# Pages of docs/ written by hand, which `check` leaves alone.
HAND_WRITTEN = {"architecture.md"}
_KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w.]*)\s*:(?P<rest>.*)$")
_FIELD_LINE = re.compile(r"^\s+(?P<key>[A-Za-z_]\w*)\s*:\s*[^=]+?(=.*)?$")


# --- reading the configs ------------------------------------------------------------------


def _conf_root() -> Traversable:
    return importlib.resources.files("kdist.conf")


def _groups(root: Traversable, prefix: str = "") -> Iterator[tuple[str, Traversable]]:
    """Every folder under `root` that holds YAML files, as (group path, folder)."""
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.is_dir() and not entry.name.startswith(("_", ".")):
            group = f"{prefix}{entry.name}"
            if any(child.name.endswith(".yaml") for child in entry.iterdir()):
                yield group, entry
            yield from _groups(entry, prefix=f"{group}/")


def _split_comment(rest: str) -> tuple[str, str]:
    """`value  # comment` -> (value, comment); a `#` inside quotes is not a comment."""
    quote = None
    for i, char in enumerate(rest):
        if char in "'\"":
            quote = None if quote == char else (quote or char)
        elif char == "#" and quote is None and (i == 0 or rest[i - 1].isspace()):
            return rest[:i].strip(), rest[i + 1 :].strip()
    return rest.strip(), ""


def _yaml_comments(text: str) -> tuple[list[str], dict[str, str]]:
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


def _paragraphs(header: list[str]) -> list[str]:
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
        lines.append(line.strip() if indented else _prose(line))
    if code:
        lines.append("```")
    return [*lines, ""] if lines else []


def _schema_comments(cls: type) -> dict[str, str]:
    """A comment per field of a dataclass (and of the dataclasses it extends): beside the
    field, or the lines above it."""
    comments: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if base is not cls and dataclasses.is_dataclass(base):
            comments.update(_schema_comments(base))
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


def _docstring_args(target: Any) -> dict[str, str]:
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


def _kdist_callable(path: Any) -> Any:
    """The callable a `_target_` names, when it is kdist's own (its docs are ours)."""
    if not isinstance(path, str) or not path.startswith("kdist."):
        return None
    module_name, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError):
        return None


def _schema_for(group: str, option_text: str) -> type | None:
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


# --- flattening an option -----------------------------------------------------------------


@dataclasses.dataclass
class _Row:
    key: str
    kind: str
    default: str
    description: str


def _format(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if value == "???":
            return "??? (required)"
        return value if value else '""'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_format(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_format(v)}" for k, v in value.items()) + "}"
    return str(value)


def _field_types(cls: type | None) -> tuple[dict[str, str], dict[str, type]]:
    """Field name -> annotation text, and field name -> nested dataclass."""
    if cls is None:
        return {}, {}
    shown = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    nested: dict[str, type] = {}
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):
        hints = {}
    for name, hint in hints.items():
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            nested[name] = hint
    return shown, nested


def _rows(
    node: Any,
    *,
    schema: type | None,
    yaml_comments: Mapping[str, str],
    prefix: str = "",
    target_docs: Mapping[str, str] | None = None,
    target_types: Mapping[str, str] | None = None,
) -> list[_Row]:
    rows: list[_Row] = []
    kinds, nested = _field_types(schema)
    schema_notes = _schema_comments(schema) if schema is not None else {}
    if isinstance(node, Mapping):
        callable_ = _kdist_callable(node.get("_target_"))
        if callable_ is not None:
            target_docs = _docstring_args(callable_)
            try:
                parameters = inspect.signature(callable_).parameters
                target_types = {
                    name: str(p.annotation)
                    for name, p in parameters.items()
                    if p.annotation is not inspect.Parameter.empty
                }
            except (TypeError, ValueError):
                target_types = {}
    for key, value in node.items() if isinstance(node, Mapping) else []:
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and key not in HYDRA_KEYS:
            # A row for the section itself when something describes it.
            doc = inspect.getdoc(nested[key]) if key in nested else None
            note = yaml_comments.get(dotted) or schema_notes.get(key) or ""
            if note or (doc and not doc.startswith(f"{nested[key].__name__}(")):
                text = note or (doc or "").splitlines()[0]
                rows.append(_Row(dotted, kinds.get(key, ""), "", text))
        if key in nested and isinstance(value, Mapping):
            rows += _rows(
                value,
                schema=nested[key],
                yaml_comments=yaml_comments,
                prefix=f"{dotted}.",
            )
            continue
        if isinstance(value, Mapping) and value and key not in HYDRA_KEYS:
            rows += _rows(
                value,
                schema=None,
                yaml_comments=yaml_comments,
                prefix=f"{dotted}.",
            )
            continue
        description = (
            yaml_comments.get(dotted)
            or schema_notes.get(key)
            or (target_docs or {}).get(key)
            or _HYDRA_NOTES.get(key, "")
        )
        kind = kinds.get(key) or (target_types or {}).get(key) or ""
        rows.append(_Row(dotted, kind, _format(value), description))
    return rows


_HYDRA_NOTES = {
    "_target_": "the callable this node builds (any importable name)",
    "_partial_": "built later, inside the strategy scope",
}


def _own_values(loaded: Any, schema: type | None) -> dict[Any, Any]:
    """A config file's own keys (no defaults list, no `hydra`), over its schema's defaults."""
    body = {
        k: v
        for k, v in OmegaConf.to_container(loaded, resolve=False).items()  # type: ignore[union-attr]
        if k not in ("defaults", "hydra")
    }
    if schema is None:
        return body
    merged = OmegaConf.merge(OmegaConf.structured(schema), body)
    return OmegaConf.to_container(merged, resolve=False)  # type: ignore[return-value]


def _option_rows(group: str, entry: Traversable) -> tuple[list[str], str | None, list[_Row]]:
    text = entry.read_text()
    header, comments = _yaml_comments(text)
    schema = _schema_for(group, text)
    loaded = OmegaConf.create(text) if text.strip() else OmegaConf.create()
    values = _own_values(loaded, schema)
    return (
        header,
        (schema.__name__ if schema else None),
        _rows(values, schema=schema, yaml_comments=comments),
    )


# --- rendering ----------------------------------------------------------------------------


def _prose(text: str) -> str:
    """`text` for Markdown: `<name>` outside backticks would be read as an HTML tag."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(rows: list[_Row]) -> list[str]:
    if not rows:
        return ["(no keys)", ""]
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for row in rows:
        kind = f"`{_cell(row.kind)}`" if row.kind else ""
        default = f"`{_cell(row.default)}`" if row.default else ""
        note = _prose(_cell(row.description))
        lines.append(f"| `{_cell(row.key)}` | {kind} | {default} | {note} |")
    return [*lines, ""]


def _group_page(group: str, folders: list[tuple[str, Traversable]]) -> str:
    lines = [
        "<!-- Generated by `python -m kdist.docs` from kdist/conf and kdist/config/schema.py;"
        " edit those, then run `make docs`. -->",
        f"# `{group}`",
        "",
    ]
    if group in GROUP_INTROS:
        lines += [GROUP_INTROS[group], ""]
    for path, folder in folders:
        options = sorted(
            (e for e in folder.iterdir() if e.name.endswith(".yaml")), key=lambda e: e.name
        )
        names = [e.name.removesuffix(".yaml") for e in options]
        lines += [f"Options of `{path}`: " + ", ".join(f"`{n}`" for n in names) + ".", ""]
        for entry, name in zip(options, names, strict=True):
            header, schema, rows = _option_rows(path, entry)
            lines += [f"## `{path}={name}`", "", *_paragraphs(header)]
            source = f"`conf/{path}/{entry.name}`"
            lines += [
                f"File {source}"
                + (f"; schema `{schema}` (kdist/config/schema.py)." if schema else "."),
                "",
            ]
            lines += _table(rows)
    return "\n".join(lines).rstrip() + "\n"


def _primary_configs(root: Traversable, groups: set[str]) -> list[str]:
    lines: list[str] = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        text = entry.read_text()
        header, comments = _yaml_comments(text)
        loaded = OmegaConf.create(text)
        defaults = loaded.get("defaults") if isinstance(loaded, DictConfig) else None
        lines += [f"### `{entry.name}`", "", *_paragraphs(header)]
        if isinstance(defaults, ListConfig):
            shown = [
                _format(d if isinstance(d, str) else OmegaConf.to_container(d)) for d in defaults
            ]
            lines += ["Defaults list: " + ", ".join(f"`{s}`" for s in shown) + ".", ""]
        schema = _schema_for("", text)
        values = _own_values(loaded, schema)
        if schema is not None:
            # The groups have their own pages.
            values = {k: v for k, v in values.items() if k not in groups}
        rows = _rows(values, schema=schema, yaml_comments=comments)
        if rows:
            lines += ["Its own keys:", "", *_table(rows)]
    return lines


def generate() -> dict[str, str]:
    """Every page of `docs/`: relative path -> Markdown text."""
    root = _conf_root()
    by_top: dict[str, list[tuple[str, Traversable]]] = {}
    for group, folder in _groups(root):
        by_top.setdefault(group.split("/")[0], []).append((group, folder))
    pages = {f"config/{top}.md": _group_page(top, folders) for top, folders in by_top.items()}
    index = [
        "<!-- Generated by `python -m kdist.docs`; edit kdist/docs.py, then run `make docs`. -->",
        "# kdist configuration",
        "",
        "A run's config is composed by Hydra from `conf/` (the package's `kdist/conf/`): a "
        "primary config such as `train.yaml` picks one option per group, and every key "
        "can be overridden on the command line (`python -m kdist.train group=option "
        "key=value`) or in Python (`kdist.compose([...])`). Each option is backed by a typed "
        "schema, so a wrong type or an unknown key stops the run before TensorFlow starts, "
        "naming the key.",
        "",
        "## Groups",
        "",
        "| group | options | page |",
        "|---|---|---|",
    ]
    for top, folders in by_top.items():
        for group, folder in folders:
            options = sorted(
                e.name.removesuffix(".yaml") for e in folder.iterdir() if e.name.endswith(".yaml")
            )
            shown = ", ".join(f"`{o}`" for o in options)
            index.append(f"| `{group}` | {shown} | [{top}](config/{top}.md) |")
    index += ["", "## Primary configs", "", *_primary_configs(root, set(by_top))]
    pages["README.md"] = "\n".join(index).rstrip() + "\n"
    return dict(sorted(pages.items()))


def check(folder: str | Path = "docs") -> list[str]:
    """The pages of `folder` that differ from `generate()` (or are missing or extra).

    Args:
        folder: the docs folder. Defaults to `"docs"`.

    Returns:
        Relative paths of stale pages; empty when `folder` is up to date.
    """
    folder = Path(folder)
    expected = generate()
    stale = [
        path
        for path, text in expected.items()
        if not (folder / path).is_file() or (folder / path).read_text() != text
    ]
    present = (
        {str(p.relative_to(folder)) for p in folder.rglob("*.md")} if folder.is_dir() else set()
    )
    generated_dirs = {str(Path(p).parent) for p in expected}
    extra = present - set(expected) - HAND_WRITTEN
    stale += sorted(p for p in extra if str(Path(p).parent) in generated_dirs)
    return stale


def write(folder: str | Path = "docs") -> list[Path]:
    """Write every generated page under `folder`, removing pages no longer generated.

    Returns:
        The paths written.
    """
    folder = Path(folder)
    expected = generate()
    written = []
    for path, text in expected.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text() != text:
            target.write_text(text)
            written.append(target)
    for old in (folder / "config").glob("*.md"):
        if str(old.relative_to(folder)) not in expected:
            old.unlink()
            written.append(old)
    return written


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m kdist.docs`."""
    parser = argparse.ArgumentParser(
        prog="python -m kdist.docs", description="Generate docs/ from kdist's configs."
    )
    parser.add_argument("--out", default="docs", help="the docs folder (default: docs)")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the folder differs from the generated pages"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = check(args.out)
        if stale:
            print(
                f"{args.out}/ is out of date ({', '.join(stale)}); run `make docs`",
                file=sys.stderr,
            )
            raise SystemExit(EXIT_FAILED)
        print(f"{args.out}/ is up to date")
        return
    written = write(args.out)
    print(
        f"wrote {len(written)} page(s) under {args.out}/" if written else f"{args.out}/ unchanged"
    )


if __name__ == "__main__":
    main()
