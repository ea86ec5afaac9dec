"""docs/architecture.md matches the code: every module it names exists, the layers hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "architecture.md"

# Module -> packages it must not import (a lower layer never imports a higher one).
LAYERS = {
    "kdist/config": ("kdist.data", "kdist.models", "kdist.engine", "kdist.callbacks"),
    "kdist/engine": ("kdist.callbacks", "kdist.experiment", "kdist.outputs", "kdist.modeling"),
    "kdist/callbacks": ("kdist.experiment", "kdist.outputs", "kdist.modeling"),
    "kdist/data": ("kdist.engine", "kdist.callbacks", "kdist.experiment"),
    "kdist/models": ("kdist.engine", "kdist.callbacks", "kdist.experiment"),
}


def _named_modules() -> set[str]:
    return set(re.findall(r"`(?:python -m )?(kdist(?:\.[a-z_]+)*)", PAGE.read_text()))


def _exists(module: str) -> bool:
    path = REPO.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_the_page_names_modules():
    names = _named_modules()
    assert len(names) > 30
    assert {"kdist.experiment", "kdist.engine.controller", "kdist.outputs"} <= names


@pytest.mark.parametrize("module", sorted(_named_modules()))
def test_every_module_the_page_names_exists(module: str):
    assert _exists(module), f"docs/architecture.md names {module}, which does not exist"


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_lower_layers_do_not_import_higher_ones(folder: str):
    forbidden = LAYERS[folder]
    offenders = []
    for path in sorted((REPO / folder).rglob("*.py")):
        for line in path.read_text().splitlines():
            match = re.match(r"\s*(?:from|import) (kdist(?:\.[a-z_]+)*)", line)
            if match and match.group(1).startswith(forbidden):
                offenders.append(f"{path.relative_to(REPO)}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
