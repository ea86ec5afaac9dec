"""docs/ is generated from the configs and cannot drift; the README's commands are valid.

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
    assert sorted(Path(p).stem for p in pages if p.startswith("config/")) == groups
    for group in groups:
        page = pages[f"config/{group}.md"]
        for option in (CONF / group).glob("*.yaml"):
            assert f"## `{group}={option.stem}`" in page, (group, option.stem)
    for group in groups:
        assert f"(config/{group}.md)" in pages["README.md"]


def _row(page: str, key: str, section: str = "") -> list[str]:
    for line in page[page.index(section) :].splitlines():
        if line.startswith(f"| `{key}` |"):
            return [cell.strip() for cell in line.strip("|").split(" | ")]
    raise AssertionError(f"no row for {key}")


def test_rows_take_types_defaults_and_descriptions_from_their_sources(pages):
    runtime = _row(pages["config/runtime.md"], "logical_devices")
    # The type from the schema, the default from the YAML, the text from its comment.
    assert runtime[1:3] == ["`int \\| None`", "`null`"]
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


def test_check_and_write(tmp_path: Path, generated_once):
    assert "README.md" in docs.check(tmp_path)
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


# --- the README -----------------------------------------------------------------------------


def _readme_commands(program: str) -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    commands = []
    for block in blocks:
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("#")[0].strip()
            if line.startswith(program):
                commands.append(shlex.split(line)[len(program.split()) :])
    return commands


def test_readme_train_commands_compose():
    from kdist.config.compose import compose

    commands = _readme_commands("python -m kdist.train")
    assert len(commands) >= 4
    for args in commands:
        config_dir = config_name = None
        overrides = []
        multirun = "-m" in args
        iterator = iter(a for a in args if a != "-m")
        for arg in iterator:
            if arg == "-cd":
                config_dir = REPO / next(iterator)
            elif arg == "-cn":
                config_name = next(iterator)
            elif multirun and "," in arg:
                overrides.append(arg.split(",")[0])  # one job of the sweep
            else:
                overrides.append(arg)
        cfg = compose(overrides, config_name=config_name or "train", config_dir=config_dir)
        assert cfg.trainer.epochs >= 1, args


def test_readme_launch_commands_name_existing_strategies():
    commands = _readme_commands("python -m kdist.launch")
    assert commands, "the README shows a multi-worker launch"
    for args in commands:
        for arg in args:
            if arg.startswith("strategy="):
                assert (CONF / "strategy" / f"{arg.split('=', 1)[1]}.yaml").is_file(), args
        if "-cn" in args:
            recipe = args[args.index("-cn") + 1]
            assert (REPO / "recipes" / f"{recipe}.yaml").is_file(), args


def test_readme_config_tree_lists_only_existing_options():
    (tree,) = re.findall(r"```text\nconf/\n(.*?)```", README, flags=re.S)
    for line in tree.splitlines():
        name, _, rest = line.strip().partition(" ")
        if not name.endswith("/"):
            assert (CONF / name).is_file(), name
            continue
        for segment in rest.split(";"):  # "a, b" or "sub/group/: c, d"
            group, _, options = segment.strip().rpartition("/: ")
            folder = CONF / (group or name.rstrip("/"))
            for option in (o.strip() for o in options.split(",")):
                assert (folder / f"{option}.yaml").is_file(), f"{folder.name}/{option}"


def test_readme_points_at_files_that_exist():
    for path in (
        "docs/README.md",
        "recipes/notebooks/quickstart.ipynb",
        "recipes/notebooks/multiworker.ipynb",
        "recipes/notebooks/parameter_server.ipynb",
    ):
        assert path in README, path
        assert (REPO / path).is_file(), path
    assert "`recipes/cluster/`" in README
    for name in ("kubernetes-multiworker.yaml", "slurm-multiworker.sbatch"):
        assert f"`{name}`" in README and (REPO / "recipes" / "cluster" / name).is_file()
    makefile = (REPO / "Makefile").read_text()
    for target in ("train", "test", "docs", "doctor"):
        assert f"make {target}" in README
        assert re.search(rf"^{target}:", makefile, flags=re.M), target


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
