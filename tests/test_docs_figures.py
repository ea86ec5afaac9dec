"""The site's figures (issue 52): each is drawn by `python -m kdist.docs`, committed under
docs/figures/, shown by a page, and the charts plot the numbers of benchmarks/results/.

Cost: ~4 s (the four figures drawn twice).
"""

from __future__ import annotations

import re

import pytest
from helpers import REPO

from kdist.pages import figures

DOCS = REPO / "docs"
RESULTS = REPO / "benchmarks" / "results"


@pytest.fixture(scope="module")
def drawn() -> dict[str, str]:
    return figures.figures()


def test_every_figure_is_committed_as_drawn(drawn):
    """Drawing again gives the same files: the committed figures are current."""
    assert set(drawn) == {f"figures/{p.name}" for p in (DOCS / "figures").glob("*.svg")}
    for path, svg in drawn.items():
        assert (DOCS / path).read_text() == svg, f"{path} is stale: run `make docs`"
    assert figures.figures() == drawn  # nothing random: no date, fixed ids


def test_every_figure_is_shown_by_a_page(drawn):
    pages = {p: p.read_text() for p in DOCS.rglob("*.md")}
    for path in drawn:
        showing = [
            p
            for p, text in pages.items()
            if re.search(rf"!\[[^\]]+\]\((\.\./)*{re.escape(path)}\)", text)
        ]
        assert showing, f"no page shows {path}"
        for page in showing:  # the relative link leads to the file
            link = re.search(rf"\]\(((?:\.\./)*{re.escape(path)})\)", pages[page])
            assert link and (page.parent / link.group(1)).resolve() == (DOCS / path).resolve()


def test_the_scaling_chart_plots_the_measured_ratios(drawn):
    svg = drawn["figures/scaling.svg"]
    for name in figures.SCALING_FILES:
        rows = figures.scaling_rows(name)
        assert len(rows) >= 4, name
        text = (RESULTS / name).read_text()
        for job, ratio in rows:
            # The row of the results table, read independently of the chart's parser.
            assert re.search(
                rf"^\| {re.escape(job)} / (recommender, )?1 process \(examples/s\) \|[^\n]*"
                rf"\| {ratio:.3f} \(best",
                text,
                flags=re.M,
            ), (name, job, ratio)
            assert f">{job}<" in svg.replace("&amp;", "&") and f">{ratio:.2f}<" in svg, job


def test_the_quality_chart_plots_the_measured_accuracy(drawn):
    svg = drawn["figures/sync-quality.svg"]
    jobs = figures.quality_rows()
    assert set(jobs) == {"digits", "cnn_synthetic"}
    text = (RESULTS / "local-sgd.md").read_text()
    for job, rows in jobs.items():
        assert rows[0][0] == "every_step" and len(rows) == 8
        for mode, accuracy in rows:
            assert f"| {mode} | {accuracy:.4f} |" in text, (job, mode)
            assert f">{100 * accuracy:.2f}<" in svg, (job, mode)


def test_a_results_table_read_by_the_chart(tmp_path):
    (tmp_path / "s.md").write_text(
        "| job | A | B | A/B or value | target |\n|---|---|---|---|---|\n"
        "| 2 MWMS workers / 1 process (examples/s) | a | b | 0.369 (best 0.344) |  |\n"
        "| 2 MWMS workers / TF loop, 2 MWMS workers (examples/s) | a | b | 1.054 (best 1) |  |\n"
        "| recommender, PS 2+2 / recommender, 1 process (examples/s) | a | b | 0.778 |  |\n"
    )
    assert figures.scaling_rows("s.md", tmp_path) == [
        ("2 MWMS workers", 0.369),
        ("recommender, PS 2+2", 0.778),
    ]
