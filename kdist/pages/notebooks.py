"""The notebooks of `recipes/notebooks/` as pages of the site, with their outputs and plots.

`docs/notebooks/<name>.ipynb` is the notebook executed top to bottom in a Jupyter kernel
(nbclient), headed by a note on where it comes from; mkdocs-jupyter renders it (mkdocs.yml).
The executed copy records the SHA-256 of the notebook's cells it was run from: it is the
cache, so `make docs` re-runs a notebook only when its cells changed (or its copy is
missing), and `python -m kdist.docs --check` (a test) names a copy that is not current.
The notebooks stay committed without outputs in `recipes/notebooks/`.

The copy is finished as a reader sees it (`finish`): the note is an HTML block (mkdocs-jupyter
leaves MkDocs's `!!! note` syntax as raw text), and each cell's printed output is what a
notebook front end shows: Keras's progress bar redraws its line with backspaces and carriage
returns, which a kernel's stream keeps and a page would draw as boxes; only the final text of
each line is kept. A copy that is current but not finished is rewritten without a re-run.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "NOTEBOOKS",
    "clean_stream",
    "execute",
    "finish",
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
        or not _is_finished(_page(folder, nb), nb)
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


# Marks the note's cell in the executed copy (its metadata), so that `finish` replaces it.
NOTE_KEY = "kdist_note"
# What a page must not print: the control characters other than tab and newline (ANSI
# colour codes, `\x1b[`, are rendered as colours by nbconvert and are allowed).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f]")


def clean_stream(text: str) -> str:
    """`text` as a notebook front end shows a stream: each backspace erases the character
    before it, and a carriage return starts its line again (JupyterLab's `fixConsole`).

    Args:
        text: what a kernel printed, with Keras's progress-bar redraws.

    Returns:
        The final text of each line, without backspaces or carriage returns.
    """
    previous = None
    while previous != text:
        previous, text = text, re.sub(r"[^\n\x08]\x08", "", text)
    text = re.sub(r"\r+\n", "\n", text)
    text = re.sub(r"^.*\r", "", text, flags=re.M)
    return text.replace("\x08", "")


def _clean_outputs(cell: Any) -> None:
    """Join a cell's consecutive outputs on the same stream (as a front end shows them)
    and clean their text."""
    outputs: list[Any] = []
    for output in cell.get("outputs", []):
        last = outputs[-1] if outputs else None
        if (
            output.output_type == "stream"
            and last is not None
            and last.output_type == "stream"
            and last.name == output.name
        ):
            last.text += output.text
        else:
            outputs.append(output)
    for output in outputs:
        if output.output_type == "stream":
            output.text = clean_stream(output.text)
    cell.outputs = [o for o in outputs if o.output_type != "stream" or o.text]


def _note(notebook: Path) -> Any:
    import nbformat

    relative = f"recipes/notebooks/{notebook.name}"
    # HTML, which mkdocs-jupyter passes through, in Material's admonition classes.
    cell = nbformat.v4.new_markdown_cell(
        '<div class="admonition note">\n<p class="admonition-title">Run it</p>\n'
        f"<p>This page is <code>{html.escape(relative)}</code>, executed by "
        "<code>make docs</code> (the outputs below are that run's). Open it in Jupyter "
        f"(<code>.venv/bin/jupyter lab {html.escape(relative)}</code>, after "
        "<code>pip install jupyterlab</code>) or any notebook front end using the "
        "<code>.venv</code> kernel.</p>\n</div>"
    )
    cell.metadata[NOTE_KEY] = True
    cell.id = "kdist-note"  # not a random one: finishing a finished copy changes nothing
    return cell


def finish(node: Any, notebook: Path, digest: str) -> Any:
    """The executed `node` as its page shows it: the note on where it comes from after the
    first cell (replacing an earlier one), clean outputs, and the digest it was run from.

    Args:
        node: the executed `nbformat.NotebookNode` (changed in place).
        notebook: its source in `recipes/notebooks/`.
        digest: `source_digest(notebook)` when it was executed.

    Returns:
        `node`.
    """
    import nbformat

    node.cells = [
        cell
        for cell in node.cells
        if not cell.metadata.get(NOTE_KEY) and not cell.source.startswith('!!! note "Run it"')
    ]
    for cell in node.cells:
        if cell.cell_type == "code":
            _clean_outputs(cell)
    node.cells.insert(1, _note(notebook))
    node.metadata[METADATA_KEY] = {
        "source": f"recipes/notebooks/{notebook.name}",
        "source_sha256": digest,
    }
    nbformat.validate(node)
    return node


def _is_finished(page: Path, notebook: Path) -> bool:
    """Whether the copy `page` is already what `finish` makes of it."""
    import nbformat

    if not page.is_file():
        return False
    text = page.read_text()
    node = nbformat.reads(text, as_version=4)
    digest = node.metadata.get(METADATA_KEY, {}).get("source_sha256", "")
    return nbformat.writes(finish(node, notebook, digest)) + "\n" == text


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
        if not force and _recorded_digest(page) == digest:
            # Current, but not finished: finish it without running it again.
            node = finish(nbformat.read(page, as_version=4), notebook, digest)
        else:
            with tempfile.TemporaryDirectory(prefix="kdist-notebook-") as cwd:
                node = finish(execute(notebook, cwd=Path(cwd)), notebook, digest)
        page.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(node, page)
        changed.append(page)
    for extra in stale - {str(p.relative_to(folder)) for p in changed}:
        if (folder / extra).is_file() and not (NOTEBOOKS / Path(extra).name).is_file():
            (folder / extra).unlink()
            changed.append(folder / extra)
    return changed
