"""The documentation site builds with `mkdocs build --strict`, serves every page, and fails
on a broken link naming the page.

Cost: ~4 s for the small builds (~8 s for the one of the three notebook pages); the whole
site (~10 s on 2 cores) is in the slow suite.
"""

from __future__ import annotations

import contextlib
import functools
import html
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from helpers import REPO

CONFIG = yaml.safe_load((REPO / "mkdocs.yml").read_text())


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of `config` into `site`, as `make docs` runs it."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _small_project(tmp_path: Path, pages: dict[str, str]) -> Path:
    """A copy of the site's configuration (theme, extensions, plugins, strictness) over
    `pages` only; returns its mkdocs.yml."""
    docs = tmp_path / "docs"
    for name, text in pages.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text)
    config = {k: v for k, v in CONFIG.items() if k not in ("nav", "docs_dir", "site_dir")}
    config["docs_dir"] = str(docs)
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            plugin["mkdocstrings"]["handlers"]["python"]["paths"] = [str(REPO)]
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def _serve(site: Path) -> Iterator[str]:
    """Serve `site` on a free loopback port in a thread; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read().decode()


def _fetch_all(site: Path) -> dict[str, str]:
    """Every HTML page of `site` and the search index, fetched over HTTP: path -> text."""
    pages = sorted(str(p.relative_to(site)) for p in site.rglob("*.html"))
    fetched = {}
    with _serve(site) as base:
        for page in [*pages, "search/search_index.json"]:
            status, text = _get(base + page)
            assert status == 200, page
            fetched[page] = text
    return fetched


def _fit_section(api_page: str) -> str:
    """The text of `Experiment.fit`'s section of the API page, without tags."""
    start = api_page.index('id="kdist.experiment.Experiment.fit"')
    # The next member's section, or the page's end (`fit` may be the last member shown).
    end = api_page.find('id="kdist.', start + 10)
    end = len(api_page) if end < 0 else end
    return html.unescape(re.sub(r"<[^>]+>", " ", api_page[start:end]))


def _check_site(fetched: dict[str, str], expected: set[str]) -> None:
    index = json.loads(fetched["search/search_index.json"])
    located = {doc["location"].split("#")[0] for doc in index["docs"]}
    for page in expected:
        assert page in fetched, page
        assert page in located or page == "404.html", f"{page} is not in the search index"
    fit = _fit_section(fetched["api/experiment.html"])
    for argument in ("validation_split", "validation_data", "class_weight", "initial_epoch"):
        assert argument in fit, argument


def _render(markdown_text: str) -> str:
    """`markdown_text` as MkDocs renders a page's body: Python-Markdown with the
    `markdown_extensions` of mkdocs.yml, configured as there."""
    import markdown

    names, configs = [], {}
    for entry in CONFIG["markdown_extensions"]:
        name, options = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
        names.append(name)
        configs[name] = {
            **(options or {}),
            **({"base_path": [str(REPO)]} if "snippets" in name else {}),
        }
    return markdown.markdown(markdown_text, extensions=names, extension_configs=configs)


def _cells(page_html: str) -> list[list[str]]:
    """The rows of every table of `page_html`, each as its cells' inner HTML."""
    rows = re.findall(r"<tr>(.*?)</tr>", page_html, flags=re.S)
    return [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, flags=re.S) for row in rows]


def _check_reference_html(pages: dict[str, str]) -> None:
    """The configuration reference's tables as a reader sees them: four cells a row, no
    code span showing a backslash before a `|`, and the union types read `int | None`."""
    unions = 0
    for name, page_html in pages.items():
        assert "\\|" not in page_html, (name, page_html[page_html.index("\\|") - 200 :][:400])
        for cells in _cells(page_html):
            assert len(cells) in (3, 4), (name, cells)  # the index's group table has 3
        unions += len(re.findall(r"<code>[^<]*\w \| None</code>", page_html))
    assert unions >= 40, unions  # 82 cells read `... \\| None` before the fix


def test_reference_tables_render_as_the_site_shows_them():
    """Each page of docs/config/ rendered with mkdocs.yml's Markdown extensions (the whole
    site's build, `test_the_whole_site`, checks the same on the built HTML)."""
    pages = {
        p.name: _render(p.read_text()) for p in sorted((REPO / "docs" / "config").glob("*.md"))
    }
    _check_reference_html(pages)


def test_a_pipe_in_code_and_in_prose():
    """What the generator writes for a `|` in a type, a default and a description, as
    rendered: the code shows a bare `|`, the prose too, and the row keeps its four cells."""
    from kdist.config.reference.render import _table
    from kdist.config.reference.rows import Row

    row = Row(key="a.b", kind="int | None", default="x|y", description="one | two `c | d`")
    text = "\n".join(_table([row]))
    (_header, cells) = _cells(_render(text))
    assert cells == [
        "<code>a.b</code>",
        "<code>int | None</code>",
        "<code>x|y</code>",
        "one | two <code>c | d</code>",
    ]


def test_site_config_is_strict():
    assert CONFIG["strict"] is True
    assert CONFIG["validation"]["links"]["not_found"] == "warn"  # a warning fails --strict
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^docs:.*\n(\t.*\n)*\t.*mkdocs build --strict", makefile, flags=re.M)


def _nav_pages(nav: list) -> list[str]:
    found = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            found += _nav_pages(value) if isinstance(value, list) else [value]
    return found


def test_nav_names_every_page_once():
    listed = _nav_pages(CONFIG["nav"])
    present = {
        str(p.relative_to(REPO / "docs"))
        for pattern in ("*.md", "*.ipynb")
        for p in (REPO / "docs").rglob(pattern)
    }
    assert len(listed) == len(set(listed))
    assert set(listed) == present


def test_a_small_site_served(tmp_path: Path):
    """The site's configuration over two pages: built, served, every page and the search
    index fetched (the whole site, API reference included, is `test_the_whole_site`)."""
    guide = (REPO / "docs" / "guides" / "notebook.md").read_text()
    guide = re.sub(r"\]\((?!https?:)[^)]*\)", "](../index.md)", guide)  # the rest of the site
    config = _small_project(tmp_path, {"index.md": "# kdist\n", "guides/notebook.md": guide})
    result = _build(config, tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]
    fetched = _fetch_all(tmp_path / "site")
    assert set(fetched) == {
        "index.html",
        "guides/notebook.html",
        "404.html",
        "search/search_index.json",
    }
    index = json.loads(fetched["search/search_index.json"])
    assert {d["location"].split("#")[0] for d in index["docs"]} >= {
        "index.html",
        "guides/notebook.html",
    }
    assert "validation_split" in fetched["guides/notebook.html"]


def _notebook_page_problems(page_html: str) -> list[str]:
    """What a reader of a notebook's built page would see wrong: MkDocs's `!!!` admonition
    syntax left as text, or a control character (drawn as a box); ANSI colours are allowed
    only as nbconvert renders them, as spans."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", page_html))
    problems = [f"raw admonition: {m.group()!r}" for m in re.finditer(r"!!! ?\w+[^\n]{0,30}", text)]
    problems += [
        f"control character {m.group()!r} after {page_html[max(0, m.start() - 40) : m.start()]!r}"
        for m in re.finditer(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", page_html)
    ]
    if 'class="admonition note"' not in page_html:
        problems.append("no note")
    return problems


def test_notebook_pages_render_their_note_and_no_control_characters(tmp_path: Path):
    """Issue 52: the built notebook pages showed `!!! note "Run it"` as raw text, and the
    quickstart's training output drew ~850 backspaces as boxes."""
    pages = {"index.md": "# kdist\n"}
    for path in sorted((REPO / "docs" / "notebooks").glob("*.ipynb")):
        pages[f"notebooks/{path.name}"] = path.read_text()
    assert len(pages) == 4
    result = _build(_small_project(tmp_path, pages), tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]
    for name in pages:
        if name.startswith("notebooks/"):
            built = (tmp_path / "site" / name).with_suffix(".html").read_text()
            assert _notebook_page_problems(built) == [], name
            assert "Epoch" in built or "examples/s" in built, name


def test_a_broken_link_fails_the_build_naming_the_page(tmp_path: Path):
    config = _small_project(
        tmp_path,
        {
            "index.md": "# kdist\n\n[ok](guide.md)\n",
            "guide.md": "# A guide\n\n[gone](missing.md)\n",
        },
    )
    result = _build(config, tmp_path / "site")
    assert result.returncode != 0
    assert "guide.md" in result.stderr and "missing.md" in result.stderr, result.stderr[-2000:]


def test_the_whole_site(tmp_path: Path):
    """`make docs`'s build of the real site: every page and the search index served."""
    result = _build(REPO / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]
    fetched = _fetch_all(tmp_path / "site")
    expected = {str(Path(page).with_suffix(".html")) for page in _nav_pages(CONFIG["nav"])} | {
        "404.html"
    }
    assert expected <= set(fetched)
    _check_site(fetched, expected)
    assert "steps_per_execution" in fetched["guides/notebook.html"]
    reference = {p: text for p, text in fetched.items() if p.startswith("config/")}
    _check_reference_html(reference)
    # No page shows MkDocs's admonition syntax as text (issue 52: the notebook pages did).
    for page, text in fetched.items():
        if page.endswith(".html"):
            shown = html.unescape(re.sub(r"<[^>]+>", " ", text))
            assert not re.search(r"!!! ?\w", shown), page
    # The notebooks' pages show what they printed and their plots (an inline PNG).
    for page in (p for p in expected if p.startswith("notebooks/")):
        assert "data:image/png;base64," in fetched[page], page
        assert "examples/s" in fetched[page] or "Epoch" in fetched[page], page
        assert _notebook_page_problems(fetched[page]) == [], page
