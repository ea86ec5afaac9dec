"""The package as published: its license, its one version, and what its sdist holds.

Cost: ~1 s; the sdist build (~10 s: setuptools from pyproject's build requirements into a
temporary folder when this environment's is older, then the sdist and a wheel from it).
"""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import tomllib
from helpers import REPO

import kdist

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def test_license_file_holds_the_license_pyproject_declares():
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    head = [line.strip() for line in text.splitlines() if line.strip()][:3]
    assert head == [
        "Apache License",
        "Version 2.0, January 2004",
        "http://www.apache.org/licenses/",
    ]
    # The full text: its nine sections, the end of the terms and the appendix.
    sections = re.findall(r"^\s+(\d)\. ([A-Z][\w ]+)\.", text, flags=re.M)
    assert [int(number) for number, _ in sections] == list(range(1, 10)), sections
    assert sections[0][1] == "Definitions" and sections[8][1].startswith("Accepting Warranty")
    assert "END OF TERMS AND CONDITIONS" in text
    assert "APPENDIX: How to apply the Apache License to your work." in text


def _tracked() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    )
    return listed.stdout.splitlines()


def test_the_version_is_written_once():
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kdist.__version__"}
    init = (REPO / "kdist" / "__init__.py").read_text()
    assert f'__version__ = "{kdist.__version__}"' in init
    # No other source or config of the checkout writes the version down again.
    written = re.compile(rf"(version|__version__)\s*[=:]\s*[\"']{re.escape(kdist.__version__)}")
    for name in _tracked():
        path = REPO / name
        if name == "kdist/__init__.py" or path.suffix not in (".py", ".toml", ".cfg", ".yaml"):
            continue
        assert not written.search(path.read_text(errors="replace")), name


def _backend(tmp_path: Path) -> dict[str, str]:
    """An environment whose setuptools meets pyproject's build requirements: this one's,
    or one installed into a temporary folder, as a build frontend's isolation would."""
    from packaging.requirements import Requirement

    env = {**os.environ}
    env.pop("PYTHONPATH", None)
    required = next(
        Requirement(r) for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")
    )
    import setuptools

    if setuptools.__version__ not in required.specifier:
        target = tmp_path / "backend"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), str(required)],
            check=True,
            timeout=600,
        )
        env["PYTHONPATH"] = str(target)
    return env


def _build(kind: str, source: Path, out: Path, env: dict[str, str]) -> Path:
    script = f"from setuptools import build_meta; print(build_meta.build_{kind}({str(out)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


def test_the_sdist_holds_the_package_and_leaves_the_tests_out(tmp_path: Path):
    tracked = _tracked()
    source = tmp_path / "checkout"  # the tracked files only, as a fresh clone has them
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        path = REPO / name
        if path.is_symlink():
            (source / name).symlink_to(os.readlink(path))
        elif path.is_file():
            shutil.copy2(path, source / name)
    env = _backend(tmp_path)
    sdist = _build("sdist", source, tmp_path / "dist", env)
    with tarfile.open(sdist) as archive:
        top = f"kdist-{kdist.__version__}/"
        names = {m.name.removeprefix(top) for m in archive.getmembers() if m.isfile()}
        info = email.message_from_bytes(archive.extractfile(top + "PKG-INFO").read())
        archive.extractall(tmp_path / "unpacked", filter="data")
    package = {
        name
        for name in tracked
        if name.startswith("kdist/") and name.endswith((".py", ".yaml", "py.typed"))
    }
    assert package <= names, sorted(package - names)[:10]
    assert {"LICENSE", "README.md", "pyproject.toml", "PKG-INFO"} <= names
    assert not [n for n in names if n.startswith("tests/")]
    extra = (
        names
        - package
        - {"LICENSE", "README.md", "pyproject.toml", "PKG-INFO", "setup.cfg", "MANIFEST.in"}
    )
    assert all(n.startswith("kdist.egg-info/") for n in extra), sorted(extra)
    assert info["Version"] == kdist.__version__
    assert info["License-Expression"] == "Apache-2.0" and info["License-File"] == "LICENSE"
    # The sdist builds the wheel users install: every module and config in it.
    wheel = _build("wheel", tmp_path / "unpacked" / top, tmp_path / "wheel", env)
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    assert package <= in_wheel, sorted(package - in_wheel)[:10]
    assert f"kdist-{kdist.__version__}.dist-info/licenses/LICENSE" in in_wheel


def test_the_package_metadata_names_no_address_that_does_not_exist():
    """Issue 52: `[project.urls]` named `kdist.example.invalid`, which an index page (and
    `pip show`) would show as links; until the site is published there are none."""
    urls = PROJECT.get("urls", {})
    assert not [u for u in urls.values() if ".invalid" in u or "example." in u], urls
    text = (REPO / "pyproject.toml").read_text()
    assert "example.invalid" not in text
