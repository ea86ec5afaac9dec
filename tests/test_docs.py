"""docs/ is generated from the configs and notebooks and cannot drift; the commands of the
README and of the site's pages are valid.

Cost: ~5 s.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
from helpers import REPO

from kdist import docs

CONF = REPO / "kdist" / "conf"
README = (REPO / "README.md").read_text()
# The hand-written pages of the site (the generated ones are checked against their sources).
SITE_PAGES = {
    str(p.relative_to(REPO)): p.read_text()
    for p in sorted((REPO / "docs").rglob("*.md"))
    if p.parent.name not in ("config", "notebooks") and p.name != "troubleshooting.md"
}
# The README and every hand-written page: where commands are shown to users.
MANUAL = {"README.md": README, **SITE_PAGES}
SUBCOMMANDS = ("train", "tune", "launch", "evaluate", "predict", "doctor", "docs")


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return docs.generate()


@pytest.fixture
def generated_once(pages, monkeypatch):
    """`docs.generate` answering from the module's one generation (it takes seconds)."""
    monkeypatch.setattr(docs, "generate", lambda: dict(pages))


def test_committed_docs_equal_the_generated_ones(generated_once):
    stale = docs.check(REPO / "docs")
    assert stale == [], f"docs/ is out of date ({', '.join(stale)}): run `make docs`"


def test_a_page_per_group_and_a_section_per_option(pages):
    groups = sorted(p.name for p in CONF.iterdir() if p.is_dir() and any(p.glob("*.yaml")))
    group_pages = [p for p in pages if p.startswith("config/") and p != "config/index.md"]
    assert sorted(Path(p).stem for p in group_pages) == groups
    for group in groups:
        page = pages[f"config/{group}.md"]
        for option in (CONF / group).glob("*.yaml"):
            assert f"## `{group}={option.stem}`" in page, (group, option.stem)
    for group in groups:
        assert f"({group}.md)" in pages["config/index.md"]


def _split_row(line: str) -> list[str]:
    """A Markdown table row's cells, as Python-Markdown splits it: at a `|` that is neither
    escaped nor inside a code span (`int | None` is one cell)."""
    cells, cell, in_code, previous = [], "", False, ""
    for char in line.strip().removeprefix("|").removesuffix("|"):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code and previous != "\\":
            cells.append(cell.strip())
            cell = ""
        else:
            cell += char
        previous = char
    return [*cells, cell.strip()]


def _row(page: str, key: str, section: str = "") -> list[str]:
    for line in page[page.index(section) :].splitlines():
        if line.startswith(f"| `{key}` |"):
            return _split_row(line)
    raise AssertionError(f"no row for {key}")


def test_rows_take_types_defaults_and_descriptions_from_their_sources(pages):
    runtime = _row(pages["config/runtime.md"], "logical_devices")
    # The type from the schema, the default from the YAML, the text from its comment.
    assert runtime[1:3] == ["`int | None`", "`null`"]
    assert "split the CPU" in runtime[3]
    # A comment above a schema field.
    scaling = _row(pages["config/optimizer.md"], "lr_scaling")
    assert "replica count" in scaling[3]
    # Under a `_target_`: the type from the callable's signature, the text from its
    # docstring (without its "Defaults to" sentence: the column shows this option's).
    fraction = _row(pages["config/data.md"], "source.validation_fraction", "## `data=digits`")
    assert fraction[1:3] == ["`float`", "`0.2`"]
    assert fraction[3].startswith("share of the examples held out for validation")
    assert "Defaults to" not in fraction[3]


def test_check_and_write(tmp_path: Path, generated_once, monkeypatch):
    # The executed notebooks have their own tests (tests/test_docs_pages.py): not run here.
    monkeypatch.setattr(docs, "refresh_notebooks", lambda folder, force=False: [])
    monkeypatch.setattr(docs, "stale_notebooks", lambda folder: [])
    assert "config/index.md" in docs.check(tmp_path)
    docs.write(tmp_path)
    assert docs.check(tmp_path) == []
    (tmp_path / "config" / "gone.md").write_text("an option that was removed\n")
    assert docs.check(tmp_path) == ["config/gone.md"]
    docs.write(tmp_path)
    assert not (tmp_path / "config" / "gone.md").exists()


def test_check_command_names_the_stale_pages(tmp_path: Path, capsys, generated_once):
    with pytest.raises(SystemExit) as stopped:
        docs.main(["--check", "--out", str(tmp_path)])
    assert stopped.value.code == 1
    assert "run `make docs`" in capsys.readouterr().err


def _undescribed(pages: dict[str, str]) -> tuple[int, list[str]]:
    """The number of rows in the config pages, and the rows without a description."""
    rows, missing = 0, []
    for path, page in pages.items():
        if not path.startswith("config/"):
            continue
        section = ""
        for line in page.splitlines():
            section = line if line.startswith("## ") else section
            cells = _split_row(line)
            if line.startswith("| `") and len(cells) == 4:
                rows += 1
                if not cells[3]:
                    missing.append(f"{path} {section}: {cells[0]}")
    return rows, missing


def test_every_row_has_a_description(pages):
    """Every key of every option, in every config page, says what it does."""
    rows, missing = _undescribed(pages)
    assert rows > 400
    assert missing == [], "rows without a description (kdist/config/schema.py):\n" + "\n".join(
        missing
    )


def test_the_row_check_sees_an_empty_description():
    page = "## `x=y`\n\n| key | type | default | description |\n|---|---|---|---|\n"
    page += "| `a` | `int` | `1` | the a |\n| `b|c` | `int | None` | `1` |  |\n"
    assert _undescribed({"config/x.md": page}) == (2, ["config/x.md ## `x=y`: `b|c`"])


# --- the README and the site's pages ---------------------------------------------------------


def _commands(program: str, text: str) -> list[list[str]]:
    """The arguments of each `program ...` line in the text's bash blocks; `kdist X ...`
    lines count as `python -m kdist.X ...` (the console command runs the same module)."""
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    commands = []
    for block in blocks:
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("  #")[0].split(" # ")[0].strip()
            line = re.sub(r"^kdist (\w+)", r"python -m kdist.\1", line)
            if line.startswith(program + " "):
                commands.append(shlex.split(line)[len(program.split()) :])
    return commands


def _manual_commands(program: str) -> list[tuple[str, list[str]]]:
    return [(name, args) for name, text in MANUAL.items() for args in _commands(program, text)]


def test_commands_map_the_console_command_to_its_module():
    text = "```bash\nkdist train model=cnn  # one\npython -m kdist.train \\\n  a=1\n```\n"
    assert _commands("python -m kdist.train", text) == [["model=cnn"], ["a=1"]]


def test_train_commands_compose():
    from kdist.config.compose import compose

    commands = _manual_commands("python -m kdist.train")
    assert len([n for n, _ in commands if n == "README.md"]) >= 4
    assert len(commands) >= 30
    composed = set()
    for name, args in commands:
        if tuple(args) in composed:  # the same command on several pages
            continue
        composed.add(tuple(args))
        config_dir = config_name = None
        overrides = []
        multirun = "-m" in args
        iterator = iter(a for a in args if a not in ("-m", "--help"))
        for arg in iterator:
            if arg == "-cd":
                config_dir = REPO / next(iterator)
            elif arg == "-cn":
                config_name = next(iterator)
            elif arg in ("-sc", "--shell-completion"):
                next(iterator)
            elif multirun and "," in arg and not arg.startswith(("'", "[", "+", "~")):
                overrides.append(arg.split(",")[0])  # one job of the sweep
            else:
                overrides.append(arg)
        try:
            cfg = compose(overrides, config_name=config_name or "train", config_dir=config_dir)
        except Exception as error:
            raise AssertionError(f"{name}: {shlex.join(args)}: {error}") from error
        assert cfg.trainer.epochs >= 1, (name, args)


def test_launch_commands_name_existing_strategies():
    commands = _manual_commands("python -m kdist.launch")
    assert [n for n, _ in commands if n == "README.md"], "the README shows a multi-worker launch"
    for name, args in commands:
        for arg in args:
            if arg.startswith("strategy="):
                option = CONF / "strategy" / f"{arg.split('=', 1)[1]}.yaml"
                assert option.is_file(), (name, args)
        if "-cn" in args:
            recipe = args[args.index("-cn") + 1]
            assert (REPO / "recipes" / f"{recipe}.yaml").is_file(), (name, args)


def test_console_commands_name_existing_subcommands():
    for name, text in MANUAL.items():
        for line in re.findall(
            r"^kdist (\S+)",
            "\n".join(re.findall(r"```bash\n(.*?)```", text, flags=re.S)),
            flags=re.M,
        ):
            assert line in SUBCOMMANDS or line.startswith("--"), (name, line)


def test_manual_points_at_recipes_that_exist():
    for name, text in MANUAL.items():
        for recipe in re.findall(r"-cd recipes -cn (\w+)", text):
            assert (REPO / "recipes" / f"{recipe}.yaml").is_file(), (name, recipe)
        for path in re.findall(
            r"recipes/(?:cluster|notebooks)/[\w.-]+\.(?:yaml|sbatch|ipynb)", text
        ):
            assert (REPO / path).is_file(), (name, path)


def _config_trees() -> dict[str, str]:
    trees = {}
    for name in ("README.md", "docs/guides/configuration.md"):
        (tree,) = re.findall(r"```text\nconf/\n(.*?)```", MANUAL[name], flags=re.S)
        trees[name] = tree
    return trees


def test_config_trees_list_every_option_and_only_existing_ones():
    for name, tree in _config_trees().items():
        listed = set()
        for line in tree.splitlines():
            entry, _, rest = line.strip().partition(" ")
            if not entry.endswith("/"):
                assert (CONF / entry).is_file(), (name, entry)
                continue
            for segment in rest.split(";"):  # "a, b" or "sub/group/: c, d"
                group, _, options = segment.strip().rpartition("/: ")
                folder = CONF / (group or entry.rstrip("/"))
                for option in (o.strip() for o in options.split(",")):
                    assert (folder / f"{option}.yaml").is_file(), (name, f"{folder.name}/{option}")
                    listed.add(str((folder / option).relative_to(CONF)))
        present = {
            str(p.relative_to(CONF).with_suffix(""))
            for p in CONF.rglob("*.yaml")
            if p.parent != CONF and not p.parent.name.startswith(("_", "."))
        }
        assert present - listed == set(), f"{name}'s config tree lacks {sorted(present - listed)}"


def _readme_link_problems(readme: str) -> list[str]:
    """The links of `readme` that lead nowhere, each with why. A link is good when it is a
    path relative to the repository's root that names a file of the checkout (and, with an
    anchor, a heading of that Markdown file, slugged as GitHub and MkDocs slug it), or an
    https URL outside the reserved `.invalid`, `.example` and `.test` domains (the site has
    no address yet: relative links work in a clone and on a forge)."""
    from urllib.parse import urlparse

    from markdown.extensions.toc import slugify

    problems = []
    for link in re.findall(r"\]\(([^)\s]+)\)", readme):
        if re.match(r"[a-z]+:", link):
            host = urlparse(link).hostname or ""
            if not link.startswith("https://") or host.split(".")[-1] in (
                "invalid",
                "example",
                "test",
                "localhost",
            ):
                problems.append(f"{link}: not a real https address")
            continue
        path, _, anchor = link.partition("#")
        source = REPO / path
        if not source.is_file():
            problems.append(f"{link}: no file {path} in the repository")
        elif anchor:
            headings = re.findall(r"^#+ (.+)$", source.read_text(), flags=re.M)
            if anchor not in {slugify(h.replace("`", ""), "-") for h in headings}:
                problems.append(f"{link}: no heading #{anchor} in {path}")
    return problems


def test_readme_links_resolve_in_the_repository():
    """Issue 52: every README link pointed at `kdist.example.invalid`, dead in a clone and on
    a forge; they lead to the repository's own files now."""
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    assert len([link for link in links if link.startswith("docs/")]) >= 10
    assert _readme_link_problems(README) == []


def test_the_readme_link_check_sees_a_dead_link():
    problems = _readme_link_problems(
        "[a](https://kdist.example.invalid/docs/index.html) [b](docs/nowhere.md) "
        "[c](docs/guides/notebook.md#no-such-heading) [d](docs/guides/notebook.md#fits-arguments)"
        " [e](https://www.tensorflow.org/guide/distributed_training)"
    )
    assert [p.split(":")[0] for p in problems] == [
        "https",
        "docs/nowhere.md",
        "docs/guides/notebook.md#no-such-heading",
    ], problems


def test_readme_is_a_front_page():
    assert len(README.splitlines()) <= 200
    for heading in (
        "## Install",
        "## From the command line",
        "## From a notebook",
        "## On a cluster",
    ):
        assert heading in README, heading
    for target in ("train", "test", "docs", "doctor"):
        assert (
            f"make {target}" in README
            or f"make {target}"
            in SITE_PAGES["docs/getting-started.md"] + SITE_PAGES["docs/development.md"]
        )
    makefile = (REPO / "Makefile").read_text()
    for target in ("train", "test", "docs", "doctor"):
        assert re.search(rf"^{target}:", makefile, flags=re.M), target


def test_readme_points_at_files_that_exist():
    for path in (
        "recipes/notebooks/quickstart.ipynb",
        "recipes/notebooks/multiworker.ipynb",
        "recipes/notebooks/parameter_server.ipynb",
    ):
        assert path in README, path
        assert (REPO / path).is_file(), path
    for page in ("docs/config/index.md", "CHANGELOG.md"):  # relative to the repository
        assert f"({page})" in README and (REPO / page).is_file(), page
    assert "`recipes/cluster/`" in README
    for name in ("kubernetes-multiworker.yaml", "slurm-multiworker.sbatch"):
        assert f"`{name}`" in README and (REPO / "recipes" / "cluster" / name).is_file()


def test_every_readme_section_of_old_lives_in_a_page():
    """The manual moved into the site: each former README section has a page."""
    site = "\n".join(SITE_PAGES.values()) + (REPO / "CHANGELOG.md").read_text()
    for text in (
        "## Exit statuses",
        "# Parameter-server training",
        "## keras-tuner hypermodels",
        "## Hydra multirun and sweeper plugins",
        "# Data sources",
        "# Bring your own Keras model",
        "## When a cluster pays",
        "# Security of local and real clusters",
        "# What works per strategy (tested)",
        "# The run directory",
        "# How the engine works",
        "## Benchmarks",
        "make lock",
        "Unreleased.",
    ):
        assert text in site, text


@pytest.mark.slow
def test_readme_two_commands_on_a_fresh_checkout(tmp_path: Path):
    """A new user's first command on a fresh checkout: `make train`, then look in outputs/."""
    import json
    import shutil
    import subprocess

    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    checkout = tmp_path / "kdist"
    for name in listed.stdout.splitlines():
        source, target = REPO / name, checkout / name
        if name.startswith(("outputs/", "multirun/")) or not source.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)  # conf -> kdist/conf
        elif source.is_file():
            shutil.copy2(source, target)
    # Nor what a `make test-all ARGS=...` around this test hands down: make exports ARGS
    # (and MAKEFLAGS), which would reach `kdist.train` as its arguments.
    inherited = ("VIRTUAL_ENV", "TF_CPP_MIN_LOG_LEVEL", "ARGS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    env = {k: v for k, v in os.environ.items() if k not in inherited}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(REPO / ".venv"))
    )
    try:
        result = subprocess.run(
            ["make", "train"], cwd=checkout, env=env, capture_output=True, text=True, timeout=1800
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        (run_dir,) = [p for p in (checkout / "outputs").glob("*/*") if p.is_dir()]
        assert json.loads((run_dir / "metrics.json").read_text())["validation"]["accuracy"] >= 0.95
        assert list((run_dir / "tensorboard" / "train").glob("events.out.tfevents.*"))
        assert (run_dir / "curves.png").is_file()
        assert "validation accuracy:" in result.stdout
    finally:
        shutil.rmtree(checkout / ".venv", ignore_errors=True)  # about 2 GB
