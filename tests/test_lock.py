"""constraints.txt: the versions `make` installs agree with pyproject.toml (issue 13)."""

from __future__ import annotations

import re

import pytest
from helpers import REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_every_requirement_is_pinned_within_its_range():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    pins = _pins()
    assert "kdist" not in pins
    for text in requirements:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in constraints.txt: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]} outside {requirement.specifier}"
        )


def test_make_installs_from_the_lock_and_reinstalls_when_it_changes():
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^\$\(STAMP\): pyproject\.toml constraints\.txt$", makefile, re.M)
    assert '-m pip install --quiet -c constraints.txt -e ".[dev]"' in makefile
    assert re.search(r"^lock: ", makefile, re.M)
