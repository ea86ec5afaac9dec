"""Issue 43's POOR command-line cases: `--version`, `--config-path`, `server`, `docs`,
SIGINT to `tune`. Cost: ~60 s."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


# --- kdist --version, whatever distribution provides TensorFlow ------------------------------


def _fake_site(root: Path, distributions: dict[str, tuple[str, str]]) -> Path:
    """A site folder holding only the dist-info of `{name: (version, top-level package)}`."""
    for name, (version, top_level) in distributions.items():
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "top_level.txt").write_text(f"{top_level}\n")
    return root


def _version_line(site: Path) -> str:
    # -S: no site-packages, so the shared venv's own tensorflow and keras are not seen.
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "from kdist.command import version_text\nprint(version_text())\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code, str(site), str(REPO)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


@pytest.mark.parametrize(
    "provider",
    ["tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly", "tensorflow-intel"],
)
def test_version_finds_tensorflow_in_any_distribution(tmp_path: Path, provider: str):
    site = _fake_site(tmp_path, {provider: ("2.21.7", "tensorflow"), "keras": ("3.15.9", "keras")})
    line = _version_line(site)
    assert "(TensorFlow 2.21.7, Keras 3.15.9, Python " in line, line


def test_version_says_when_tensorflow_is_missing(tmp_path: Path):
    site = _fake_site(
        tmp_path, {"keras": ("3.15.9", "keras"), "tensorboard": ("2.21.0", "tensorboard")}
    )
    assert "(TensorFlow not installed, Keras 3.15.9, " in _version_line(site)
