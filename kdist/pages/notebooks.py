"""The notebooks of `recipes/notebooks/` as pages of the site, with their outputs and plots.

`docs/notebooks/<name>.ipynb` is the notebook executed top to bottom in a Jupyter kernel
(nbclient), headed by a note on where it comes from; mkdocs-jupyter renders it (mkdocs.yml).
The executed copy records the SHA-256 of the notebook's cells it was run from: it is the
cache, so `make docs` re-runs a notebook only when its cells changed (or its copy is
missing), and `python -m kdist.docs --check` (a test) names a copy that is not current.
The notebooks stay committed without outputs in `recipes/notebooks/`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "NOTEBOOKS",
    "execute",
    "refresh_notebooks",
    "source_digest",
    "stale_notebooks",
]

# The notebooks of a checkout (absent from an installed wheel: then no notebook pages).
NOTEBOOKS = Path(__file__).resolve().parents[2] / "recipes" / "notebooks"
# Where the executed copy records what it was run from.
METADATA_KEY = "kdist"
# The longest one notebook may run (the cluster notebooks start several processes).
TIMEOUT_S = 1800


def source_digest(notebook: Path) -> str:
    """The SHA-256 of a notebook's cells (their kinds and sources), its outputs left out.

    Args:
        notebook: the `.ipynb` file of `recipes/notebooks/`.

    Returns:
        A hex digest.
    """
    cells = json.loads(notebook.read_text())["cells"]
    kept = [(cell["cell_type"], "".join(cell.get("source", []))) for cell in cells]
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()


def _page(folder: Path, notebook: Path) -> Path:
    return folder / "notebooks" / notebook.name


def _recorded_digest(page: Path) -> str | None:
    if not page.is_file():
        return None
    metadata = json.loads(page.read_text()).get("metadata", {})
    digest = metadata.get(METADATA_KEY, {}).get("source_sha256")
    return digest if isinstance(digest, str) else None


def stale_notebooks(folder: str | Path = "docs") -> list[str]:
    """The executed notebooks of `folder` that are missing, not current, or extra.

    Args:
        folder: the docs folder. Defaults to `"docs"`.

    Returns:
        Relative paths (`notebooks/quickstart.ipynb`); empty when every copy is current.
    """
    folder = Path(folder)
    sources = sorted(NOTEBOOKS.glob("*.ipynb")) if NOTEBOOKS.is_dir() else []
    stale = [
        str(_page(folder, nb).relative_to(folder))
        for nb in sources
        if _recorded_digest(_page(folder, nb)) != source_digest(nb)
    ]
    names = {nb.name for nb in sources}
    present = sorted((folder / "notebooks").glob("*.ipynb")) if sources else []
    return stale + [f"notebooks/{p.name}" for p in present if p.name not in names]


def execute(notebook: Path, *, cwd: Path, timeout: int = TIMEOUT_S) -> Any:
    """Run `notebook` top to bottom in a fresh `python3` kernel started in `cwd`.

    The kernel gets this process's environment without `TF_CPP_MIN_LOG_LEVEL`, so that its
    outputs are what a user sees.

    Args:
        notebook: the `.ipynb` file.
        cwd: the kernel's working folder (its runs write `outputs/` there).
        timeout: the longest one cell may run, in seconds. Defaults to `TIMEOUT_S`.

    Returns:
        The executed `nbformat.NotebookNode`.

    Raises:
        nbclient.exceptions.CellExecutionError: a cell raised; names the cell.
    """
    import nbclient
    import nbformat

    node = nbformat.read(notebook, as_version=4)
    saved = os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
    try:
        client = nbclient.NotebookClient(
            node,
            timeout=timeout,
            kernel_name="python3",
            record_timing=False,  # no timestamps: a re-run changes outputs, not metadata
            resources={"metadata": {"path": str(cwd)}},
        )
        client.execute()
    finally:
        if saved is not None:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = saved
    return node


def _with_note(node: Any, notebook: Path, digest: str) -> Any:
    import nbformat

    relative = f"recipes/notebooks/{notebook.name}"
    note = nbformat.v4.new_markdown_cell(
        f'!!! note "Run it"\n    This page is `{relative}`, executed by `make docs` (the outputs '
        "below are that run's). Open it in Jupyter (`.venv/bin/jupyter lab "
        f"{relative}`, after `pip install jupyterlab`) or any notebook front end using the "
        "`.venv` kernel."
    )
    node.cells.insert(1, note)
    node.metadata[METADATA_KEY] = {"source": relative, "source_sha256": digest}
    nbformat.validate(node)
    return node


def refresh_notebooks(folder: str | Path = "docs", *, force: bool = False) -> list[Path]:
    """Execute each notebook whose copy under `folder` is not current; remove extra copies.

    Args:
        folder: the docs folder. Defaults to `"docs"`.
        force: re-run every notebook, current or not. Defaults to `False`.

    Returns:
        The paths written or removed.
    """
    import nbformat

    folder = Path(folder)
    stale = set(stale_notebooks(folder))
    changed: list[Path] = []
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")) if NOTEBOOKS.is_dir() else []:
        page = _page(folder, notebook)
        if not force and str(page.relative_to(folder)) not in stale:
            continue
        digest = source_digest(notebook)
        with tempfile.TemporaryDirectory(prefix="kdist-notebook-") as cwd:
            node = _with_note(execute(notebook, cwd=Path(cwd)), notebook, digest)
        page.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(node, page)
        changed.append(page)
    for extra in stale - {str(p.relative_to(folder)) for p in changed}:
        if (folder / extra).is_file() and not (NOTEBOOKS / Path(extra).name).is_file():
            (folder / extra).unlink()
            changed.append(folder / extra)
    return changed
