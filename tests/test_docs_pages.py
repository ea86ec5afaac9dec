"""The site's pages made by running kdist: the executed notebooks (current, with their
outputs and a plot; re-run only when their cells change) and the troubleshooting page
(every exit status; each refusal's message is what kdist prints).

Cost: ~10 s (the ten refusals run through `kdist train`'s command-line check in-process);
the notebooks are not executed here (tests/test_notebooks.py runs them).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from helpers import REPO

from kdist import docs
from kdist.pages import notebooks, troubleshooting
from kdist.process import exit_codes

DOCS = REPO / "docs"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --- the notebooks ----------------------------------------------------------------------------


def test_each_notebook_is_a_page_executed_from_its_current_cells():
    sources = sorted(notebooks.NOTEBOOKS.glob("*.ipynb"))
    assert [p.name for p in sources] == sorted(p.name for p in DOCS.glob("notebooks/*.ipynb"))
    assert notebooks.stale_notebooks(DOCS) == [], "run `make docs` (python -m kdist.docs)"
    for source in sources:
        page = nbformat.read(DOCS / "notebooks" / source.name, as_version=4)
        nbformat.validate(page)
        assert page.metadata["kdist"]["source"] == f"recipes/notebooks/{source.name}"
        # The page's cells are the notebook's, with the note on where it comes from.
        original = nbformat.read(source, as_version=4)
        kept = [c for c in page.cells if not c.metadata.get(notebooks.NOTE_KEY)]
        assert [(c.cell_type, c.source) for c in kept] == [
            (c.cell_type, c.source) for c in original.cells
        ]
        code = [c for c in page.cells if c.cell_type == "code"]
        assert all(c.execution_count for c in code), source.name
        outputs = [o for c in code for o in c.outputs]
        assert not [o for o in outputs if o.output_type == "error"], source.name
        assert not [o for o in outputs if o.get("name") == "stderr"], source.name
        images = [o.data["image/png"] for o in outputs if "image/png" in o.get("data", {})]
        assert images and all(base64.b64decode(i).startswith(PNG_MAGIC) for i in images)


def test_notebook_pages_print_no_control_characters():
    """Issue 52: the quickstart's saved training output held ~850 backspaces (Keras's
    progress bar redrawing its line under a kernel), drawn as boxes on the page; and the
    note was MkDocs's `!!! note`, which mkdocs-jupyter shows as raw text."""
    for path in sorted(DOCS.glob("notebooks/*.ipynb")):
        page = nbformat.read(path, as_version=4)
        for cell in page.cells:
            assert not cell.source.lstrip().startswith("!!!"), (path.name, cell.source[:80])
            for output in cell.get("outputs", []):
                texts = [output.get("text", "")] + [
                    v for v in output.get("data", {}).values() if isinstance(v, str)
                ]
                for text in texts:
                    found = notebooks.CONTROL.search(text)
                    assert found is None, (path.name, text[max(0, found.start() - 60) :][:120])
        (note,) = [c for c in page.cells if c.metadata.get(notebooks.NOTE_KEY)]
        assert note.source.startswith('<div class="admonition note">'), note.source


def test_a_progress_bar_is_kept_as_its_final_lines():
    """What Keras's progress bar prints under a kernel (a line redrawn with backspaces and
    carriage returns, split over outputs), cleaned as a front end shows it."""
    redraw = "\x08" * 20 + "\r 8/22 ━━ - loss: 2.2"
    cell = nbformat.v4.new_code_cell(
        "fit()",
        outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="Epoch 1/2\n"),
            nbformat.v4.new_output("stream", name="stdout", text="\r 1/22 ━ - loss: 2.3"),
            nbformat.v4.new_output("stream", name="stdout", text=redraw),
            nbformat.v4.new_output(
                "stream", name="stdout", text="\x08" * 30 + "\r22/22 ━━━ - loss: 1.9  \n"
            ),
            nbformat.v4.new_output("stream", name="stdout", text="Epoch 2/2\n\r22/22 ━━━\n"),
        ],
    )
    node = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A"), cell])
    source = REPO / "recipes" / "notebooks" / "quickstart.ipynb"
    finished = notebooks.finish(node, source, "0" * 64)
    (stream,) = finished.cells[2].outputs
    assert stream.text == "Epoch 1/2\n22/22 ━━━ - loss: 1.9  \nEpoch 2/2\n22/22 ━━━\n"
    # Finishing again changes nothing, and replaces the note rather than adding one.
    again = notebooks.finish(finished, source, "0" * 64)
    assert [c.metadata.get(notebooks.NOTE_KEY, False) for c in again.cells] == [
        False,
        True,
        False,
    ]
    assert again.cells[2].outputs == [stream]


def test_the_site_renders_the_executed_notebooks():
    import yaml

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    (jupyter,) = [p["mkdocs-jupyter"] for p in config["plugins"] if "mkdocs-jupyter" in p]
    assert jupyter["execute"] is False  # executed by kdist.docs, with its cache
    listed = json.dumps(config["nav"])
    for page in DOCS.glob("notebooks/*.ipynb"):
        assert f"notebooks/{page.name}" in listed


def _fake_execute(calls: list[str]):
    def execute(notebook: Path, *, cwd: Path, timeout: int = 0):
        calls.append(notebook.name)
        node = nbformat.read(notebook, as_version=4)
        for cell in node.cells:
            if cell.cell_type == "code":
                cell.execution_count = 1
        return node

    return execute


def test_an_unchanged_notebook_is_not_run_again(tmp_path: Path, monkeypatch):
    sources = tmp_path / "recipes"
    sources.mkdir()
    for name in ("a.ipynb", "b.ipynb"):
        node = nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_markdown_cell("# A"), nbformat.v4.new_code_cell("1 + 1")]
        )
        nbformat.write(node, sources / name)
    monkeypatch.setattr(notebooks, "NOTEBOOKS", sources)
    calls: list[str] = []
    monkeypatch.setattr(notebooks, "execute", _fake_execute(calls))
    site = tmp_path / "docs"
    assert notebooks.stale_notebooks(site) == ["notebooks/a.ipynb", "notebooks/b.ipynb"]
    notebooks.refresh_notebooks(site)
    assert calls == ["a.ipynb", "b.ipynb"] and notebooks.stale_notebooks(site) == []
    notebooks.refresh_notebooks(site)  # nothing changed: nothing runs
    assert calls == ["a.ipynb", "b.ipynb"]
    # A changed cell makes its notebook stale, and only it runs again.
    node = nbformat.read(sources / "b.ipynb", as_version=4)
    node.cells[1].source = "2 + 2"
    nbformat.write(node, sources / "b.ipynb")
    assert notebooks.stale_notebooks(site) == ["notebooks/b.ipynb"]
    notebooks.refresh_notebooks(site)
    assert calls == ["a.ipynb", "b.ipynb", "b.ipynb"]
    # Outputs alone (a notebook saved after a run) do not count as a change.
    node.cells[1].outputs = [nbformat.v4.new_output("stream", text="4\n")]
    nbformat.write(node, sources / "b.ipynb")
    assert notebooks.stale_notebooks(site) == []
    notebooks.refresh_notebooks(site, force=True)
    assert calls[3:] == ["a.ipynb", "b.ipynb"]
    # A notebook gone from recipes/ leaves the site.
    (sources / "a.ipynb").unlink()
    assert notebooks.stale_notebooks(site) == ["notebooks/a.ipynb"]
    notebooks.refresh_notebooks(site)
    assert sorted(p.name for p in (site / "notebooks").iterdir()) == ["b.ipynb"]


def test_check_names_a_notebook_not_current(tmp_path: Path, monkeypatch, capsys):
    site = tmp_path / "docs"
    shutil.copytree(DOCS / "notebooks", site / "notebooks")
    page = site / "notebooks" / "quickstart.ipynb"
    node = json.loads(page.read_text())
    node["metadata"]["kdist"]["source_sha256"] = "0" * 64
    page.write_text(json.dumps(node))
    monkeypatch.setattr(docs, "generate", dict)  # the Markdown pages are another test's
    monkeypatch.setattr(docs.reference, "check", lambda folder, pages: [])
    with pytest.raises(SystemExit):
        docs.main(["--check", "--out", str(site)])
    assert "notebooks/quickstart.ipynb" in capsys.readouterr().err


# --- troubleshooting --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def page() -> str:
    return (DOCS / "troubleshooting.md").read_text()


def test_every_exit_status_has_a_row(page: str):
    assert set(troubleshooting.EXIT_ADVICE) == set(exit_codes.EXIT_CODES)
    for status, meaning in exit_codes.EXIT_CODES.items():
        assert re.search(rf"^\| {status} \| `EXIT_\w+` \| {re.escape(meaning)} \|", page, re.M)


def test_ten_refusals_with_what_kdist_prints(page: str):
    """Each refusal run again now: its message is on the page, and it is one line from
    kdist with the config-error status (the page is also compared whole with the
    generator's by test_docs's test_committed_docs_equal_the_generated_ones)."""
    assert len(troubleshooting.REFUSALS) == 10
    for refusal in troubleshooting.REFUSALS:
        status, stderr = troubleshooting.refusal_output(refusal)
        assert status == exit_codes.EXIT_CONFIG_ERROR, refusal.title
        last = stderr.splitlines()[-1]
        assert last.startswith("kdist: config error: "), stderr
        assert f"$ kdist train {' '.join(refusal.args)}\n" in page
        assert last in page, refusal.title
        assert refusal.cause in page and refusal.fix in page


def test_bug_reports_ask_for_the_doctor(page: str):
    section = page[page.index("## Reporting a bug") :]
    assert "kdist doctor" in section and "--no-probes --json" in section


# --- troubleshooting: clusters and machines (issue 52) ----------------------------------------


def test_clusters_and_machines_have_a_section_each(page: str):
    """Issue 52: the page covered configuration errors only."""
    from kdist.pages import cluster_troubles

    part = page[page.index("## Clusters and machines") : page.index("## Reporting a bug")]
    headings = re.findall(r"^### (.+)$", part, flags=re.M)
    for topic in ("TF_CONFIG", "waits for a worker", "port in use", "Out of memory", "full disk"):
        assert any(topic in h for h in headings), (topic, headings)
    assert any("worker died" in h for h in headings), headings
    # Each section shows a command and what the user sees, then the cause and the fix.
    for trouble in cluster_troubles.TROUBLES:
        section = part[part.index(f"### {trouble.title}") :]
        assert section.index("$ ") < section.index("**Cause:**") < section.index("**Fix:**")


def test_tf_config_mistakes_show_what_kdist_prints(page: str):
    from kdist.pages import cluster_troubles

    assert len(cluster_troubles.TF_CONFIG_MISTAKES) >= 4
    for _, text in cluster_troubles.TF_CONFIG_MISTAKES:
        line = cluster_troubles.tf_config_message(text)
        assert line.startswith("kdist: config error: TF_CONFIG: ") and "\n" not in line
        assert f"    {line}\n" in page, line


def test_a_tf_config_mistake_as_the_command_prints_it(tmp_path: Path, page: str):
    """The page's line is what `kdist train` prints, in a fresh process (~2 s)."""
    import os
    import subprocess
    import sys

    from kdist.pages import cluster_troubles

    _, text = cluster_troubles.TF_CONFIG_MISTAKES[1]
    env = {**os.environ, "TF_CONFIG": text}
    result = subprocess.run(
        [sys.executable, "-m", "kdist.train", "strategy=multi_worker_mirrored"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == exit_codes.EXIT_CONFIG_ERROR, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert f"    {last}\n" in page, last


def test_measured_messages_are_still_what_kdist_prints():
    """The messages measured by running a case (a full disk, a worker that died) hold parts
    that kdist prints: each is still in kdist's source."""
    from kdist.pages import cluster_troubles

    source = "\n".join(p.read_text() for p in (REPO / "kdist").rglob("*.py"))
    fragments = [f for t in cluster_troubles.TROUBLES for f in t.printed_by]
    assert len(fragments) >= 5
    for fragment in fragments:
        assert fragment in source, fragment
