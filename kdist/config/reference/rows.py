"""An option of a config group, flattened into one row per key: type, default, description."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Mapping
from importlib.resources.abc import Traversable
from typing import Any

from omegaconf import OmegaConf

from kdist.config.constants import HYDRA_KEYS
from kdist.config.reference.sources import (
    docstring_args,
    kdist_callable,
    schema_comments,
    schema_for,
    yaml_comments,
)

__all__ = ["Row", "field_types", "format_default", "key_rows", "option_rows", "own_values"]


@dataclasses.dataclass
class Row:
    key: str
    kind: str
    default: str
    description: str


def format_default(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if value == "???":
            return "??? (required)"
        return value if value else '""'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_default(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_default(v)}" for k, v in value.items()) + "}"
    return str(value)


def field_types(cls: type | None) -> tuple[dict[str, str], dict[str, type]]:
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


def key_rows(
    node: Any,
    *,
    schema: type | None,
    yaml_comments: Mapping[str, str],
    prefix: str = "",
    target_docs: Mapping[str, str] | None = None,
    target_types: Mapping[str, str] | None = None,
) -> list[Row]:
    rows: list[Row] = []
    kinds, nested = field_types(schema)
    schema_notes = schema_comments(schema) if schema is not None else {}
    if isinstance(node, Mapping):
        callable_ = kdist_callable(node.get("_target_"))
        if callable_ is not None:
            target_docs = docstring_args(callable_)
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
                rows.append(Row(dotted, kinds.get(key, ""), "", text))
        if key in nested and isinstance(value, Mapping):
            rows += key_rows(
                value,
                schema=nested[key],
                yaml_comments=yaml_comments,
                prefix=f"{dotted}.",
            )
            continue
        if isinstance(value, Mapping) and value and key not in HYDRA_KEYS:
            rows += key_rows(
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
            or _sweep_note(value)
        )
        kind = kinds.get(key) or (target_types or {}).get(key) or ""
        rows.append(Row(dotted, kind, format_default(value), description))
    return rows


_HYDRA_NOTES = {
    "_target_": "the callable this node builds (any importable name)",
    "_partial_": "built later, inside the strategy scope",
}


def _sweep_note(value: Any) -> str:
    """What a search-space entry (a Hydra sweep expression, `tuner.space`) searches."""
    if not isinstance(value, str):
        return ""
    text = value.replace(" ", "")
    if text.startswith("tag(log,"):
        return "searched on a log scale: " + _sweep_note(text[len("tag(log,") : -1])
    if text.startswith("choice("):
        return "searched: one of the listed values"
    if text.startswith("interval("):
        return "searched: a float in the interval [low, high]"
    if text.startswith("range("):
        return "searched: an integer from start up to stop, by step"
    return ""


def own_values(loaded: Any, schema: type | None) -> dict[Any, Any]:
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


def option_rows(group: str, entry: Traversable) -> tuple[list[str], str | None, list[Row]]:
    text = entry.read_text()
    header, comments = yaml_comments(text)
    schema = schema_for(group, text)
    loaded = OmegaConf.create(text) if text.strip() else OmegaConf.create()
    values = own_values(loaded, schema)
    return (
        header,
        (schema.__name__ if schema else None),
        key_rows(values, schema=schema, yaml_comments=comments),
    )
