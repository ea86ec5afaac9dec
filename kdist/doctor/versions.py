"""The doctor's `versions` rows: Python, kdist and each runtime requirement."""

from __future__ import annotations

import importlib.metadata as metadata
import platform
import sys
from collections.abc import Callable, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from kdist.doctor.table import Check

__all__ = [
    "FALLBACK_REQUIREMENTS",
    "TF_DISTRIBUTIONS",
    "check_versions",
    "installed",
    "requirements",
]

# Every distribution that installs the `tensorflow` package; two of them overwrite
# each other's files.
TF_DISTRIBUTIONS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-intel",
    "tensorflow-macos",
    "tf-nightly",
    "tf-nightly-cpu",
)
# kdist's runtime requirements, for a source tree that is not pip-installed (a test
# checks that it matches pyproject.toml).
FALLBACK_REQUIREMENTS = (
    "tensorflow>=2.21,<2.22",
    "keras>=3.15,<3.16",
    "keras-tuner>=1.4.7,<1.5",
    "tensorboard>=2.21",
    "hydra-core>=1.3.2,<1.4",
    "scikit-learn>=1.3",
    "matplotlib>=3.7",
    "packaging>=23",
)


def installed(name: str) -> str | None:
    """The installed version of distribution `name`, or `None` when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def requirements() -> tuple[list[Requirement], bool]:
    """kdist's runtime requirements and whether they come from its installed metadata."""
    try:
        declared = metadata.requires("kdist") or []
        from_metadata = True
    except metadata.PackageNotFoundError:
        declared, from_metadata = list(FALLBACK_REQUIREMENTS), False
    found = []
    for text in declared:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        # Extras (`dev`) are tools for developers, not needed to train.
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        found.append(requirement)
    return found, from_metadata


def check_versions(
    installed: Callable[[str], str | None] = installed,
    reqs: Sequence[Requirement] | None = None,
) -> list[Check]:
    """Rows for Python, kdist and each runtime requirement against the installed versions.

    Args:
        installed: distribution name -> installed version or `None`.
            Defaults to reading the environment's package metadata.
        reqs: the requirements. Defaults to `None`: kdist's own (`requirements()`).
    """
    rows = []
    python = platform.python_version()
    rows.append(
        Check(
            "versions",
            "python",
            "ok" if sys.version_info >= (3, 10) else "FAIL",
            f"{python} ({sys.executable})"
            + ("" if sys.version_info >= (3, 10) else "; kdist needs Python >= 3.10"),
        )
    )
    from_metadata = True
    if reqs is None:
        reqs, from_metadata = requirements()
    kdist_version = installed("kdist")
    rows.append(
        Check(
            "versions",
            "kdist",
            "ok" if from_metadata else "warn",
            kdist_version
            if from_metadata and kdist_version
            else "not pip-installed: run `pip install -e .` (or `make install`) in the repo",
        )
    )
    for req in reqs:
        version = installed(req.name)
        # ">=2.21,<2.22" reads better than packaging's sorted "<2.22,>=2.21".
        wanted = ",".join(sorted(map(str, req.specifier), key=lambda c: c[0] != ">")) or "any"
        install = f"pip install '{req.name}{req.specifier}'"
        if version is None:
            rows.append(Check("versions", req.name, "FAIL", f"missing; {install}"))
            continue
        try:
            fits = req.specifier.contains(Version(version), prereleases=True)
        except InvalidVersion:
            fits = False
        detail = f"{version} (kdist needs {wanted})"
        if not fits:
            detail += f"; {install}"
        rows.append(Check("versions", req.name, "ok" if fits else "FAIL", detail))
    return rows
