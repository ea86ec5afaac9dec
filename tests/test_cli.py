"""The `kdist` command: subcommands, help made for people, completion, and process hygiene.

`kdist X ...` runs the `main()` of `python -m kdist.X ...` with the same arguments. The
installed script (`[project.scripts]`) is checked by what it points at; the command itself
runs as `python -m kdist`, which is the same function (the shared venv's script may belong
to another checkout).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import kdist
from kdist import command
from kdist.config.compose import compose, format_hydra_error
from kdist.config.errors import ConfigError
from kdist.config.groups import COMMAND_GROUPS, group_options, groups_help

REPO = Path(__file__).resolve().parents[1]


def _kdist(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`kdist args...` as `python -m kdist args...` (the installed script's function)."""
    return subprocess.run(
        [sys.executable, "-m", "kdist", *args],
        cwd=REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- the command --------------------------------------------------------------------------


def test_the_installed_script_is_the_command_function():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    module_name, _, attribute = project["scripts"]["kdist"].partition(":")
    assert getattr(importlib.import_module(module_name), attribute) is command.main
    # `python -m kdist` runs the same function.
    main_module = (REPO / "kdist" / "__main__.py").read_text()
    assert "from kdist.command import main" in main_module


def test_every_python_m_entry_point_is_a_subcommand():
    modules = {c.module.removesuffix(".checkup") for c in command.COMMANDS.values()}
    found = {
        f"kdist.{path.stem}"
        for path in (REPO / "kdist").glob("*.py")
        if 'if __name__ == "__main__"' in path.read_text()
        and path.stem not in ("__main__", "command")
    }
    found.add("kdist.doctor")  # a package: kdist/doctor/__main__.py
    assert found == modules
    for name, entry in command.COMMANDS.items():
        assert name == entry.module.split(".")[1]
        assert callable(importlib.import_module(entry.module).main)


def test_help_lists_every_subcommand_in_one_line(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as caught:
        command.main(["--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    for name, entry in command.COMMANDS.items():
        assert re.search(rf"^  {name} +{re.escape(entry.summary)}$", out, re.M), name
    assert "kdist --version" not in out and "-V, --version" in out


def test_an_unknown_or_missing_subcommand_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as caught:
        command.main(["trian", "model=cnn"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("kdist: unknown command 'trian' (did you mean 'train'?); commands: ")
    assert all(name in err for name in command.COMMANDS)
    with pytest.raises(SystemExit) as caught:
        command.main([])
    assert caught.value.code == 2
    assert "usage: kdist <command>" in capsys.readouterr().err


def test_version_names_tensorflow_and_keras_without_importing_them():
    code = (
        "import sys; from kdist.command import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit as e:\n    code = e.code\n"
        "print('imported', 'tensorflow' in sys.modules, 'keras' in sys.modules, code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert re.fullmatch(
        rf"kdist {re.escape(kdist.__version__)} \(TensorFlow 2\.21\.\d+, Keras 3\.15\.\d+, "
        r"Python 3\.\d+\.\d+\)",
        first,
    ), first
    assert second == "imported False False 0"


def test_python_m_kdist_is_the_same_command():
    result = _kdist("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == command.usage().strip()


def test_a_subcommand_names_itself_in_its_usage(capsys: pytest.CaptureFixture[str]):
    from kdist import launch

    saved = sys.argv
    try:
        sys.argv = ["kdist launch", "--help"]
        with pytest.raises(SystemExit) as caught:
            launch.main()
    finally:
        sys.argv = saved
    assert caught.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: kdist launch ")
    # Every option shows its default.
    for shown in ("(default: 0)", "(default: kdist.train)", "(default: 127.0.0.1)"):
        assert shown in out
    assert "--workers WORKERS worker processes (required)" in out
    assert command.program("kdist.launch") == "python -m kdist.launch"


# -- help made for people -----------------------------------------------------------------


def test_train_help_lists_its_groups_and_choices_without_schemas():
    result = _kdist("train", "model=cnn", "--help")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("kdist train: train a Keras 3 model")
    assert "base_" not in out and "tuner" not in out
    for group in COMMAND_GROUPS["train"]:
        assert re.search(rf"^  {group} +\S", out, re.M), group
    assert re.search(r"^  model +cnn\*, custom, mlp, ", out, re.M)  # the current choice
    assert re.search(
        r"^  strategy +auto, mirrored, multi_worker_mirrored, one_device\*, ", out, re.M
    )
    examples = re.findall(r"^  kdist train .+$", out, re.M)
    assert len(examples) == 3, examples
    assert 'eval "$(kdist -sc install=bash)"' in out


def test_tune_help_adds_the_tuner_groups():
    text = groups_help("tune", {"tuner": "random"})
    assert re.search(r"^  tuner +bayesian, hyperband, random\*$", text, re.M)
    assert re.search(r"^  tuner/space +cnn, mlp$", text, re.M)
    assert "tuner" not in groups_help("train")
    assert "base_" not in text
    assert group_options("strategy") == [
        "auto",
        "mirrored",
        "multi_worker_mirrored",
        "one_device",
        "parameter_server",
    ]


def test_a_schema_entry_is_not_an_option():
    with pytest.raises(ConfigError) as caught:
        compose(["strategy=base_mirrored"])
    assert str(caught.value) == (
        "strategy='base_mirrored': is a typed schema, not an option to pick; did you mean "
        "strategy=mirrored? options: auto, mirrored, multi_worker_mirrored, one_device, "
        "parameter_server"
    )
    with pytest.raises(ConfigError, match=r"^model='base_cnn'"):
        compose(["model=mlp,base_cnn"])  # a sweep's values too


def test_the_command_refuses_a_schema_entry_before_training(tmp_path: Path):
    result = _kdist(
        "train", "-m", "strategy=one_device,base_mirrored", f"hydra.sweep.dir={tmp_path}"
    )
    assert result.returncode == 2
    assert result.stderr.startswith("kdist: config error: strategy='base_mirrored': ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("override", "meant"),
    [
        ("trainer.epochz=3", "did you mean trainer.epochs? valid keys: epochs, "),
        ("traner.epochs=3", "traner: unknown key; did you mean trainer? valid keys: "),
        ("strategy=mirrorred", "no such option; did you mean strategy=mirrored? available: "),
        ("optimizer=adamm", "no such option; did you mean optimizer=adam? available: "),
    ],
)
def test_a_mistyped_key_or_choice_names_the_one_probably_meant(override: str, meant: str):
    with pytest.raises(Exception) as caught:  # Hydra's and OmegaConf's many types
        compose([override])
    line = format_hydra_error(caught.value)
    assert meant in line
    assert "\n" not in line


# -- shell completion (Hydra's query mode, as the installed script answers it) ------------


def _query(line: str, *args: str) -> list[str]:
    result = _kdist(*args, "-sc", "query=bash", env={"COMP_LINE": line, "COMP_POINT": "0"})
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_completion_of_train_overrides_leaves_out_schemas():
    words = _query("kdist train strategy=", "train")
    assert words == [f"strategy={option}" for option in group_options("strategy")]


def test_completion_through_the_top_level_query(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    # What bash asks the installed script: `kdist -sc query=bash` with the typed line.
    monkeypatch.setenv("COMP_LINE", "kdist t")
    command.main(["-sc", "query=bash"])
    assert capsys.readouterr().out.split() == ["train", "tune"]
    monkeypatch.setenv("COMP_LINE", "kdist launch --wo")
    command.main(["-sc", "query=bash"])
    assert capsys.readouterr().out.split() == ["--workers"]  # argparse: its `--help`'s flags
    assert _query("kdist tune tuner=") == [f"tuner={option}" for option in group_options("tuner")]


def test_the_completion_script_registers_the_kdist_command():
    result = _kdist("-sc", "install=bash")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("-F hydra_bash_completion kdist")
    assert "${words[0]}" in result.stdout  # it asks the script itself: `kdist -sc query=bash`


# -- hygiene --------------------------------------------------------------------------------


def test_importing_kdist_changes_nothing_in_the_process():
    code = (
        "import json, os, sys\n"
        "env, hooks = dict(os.environ), list(sys.meta_path)\n"
        "stderr = os.fstat(2)\n"
        "import kdist\n"
        "kdist.compose  # the lazy attribute alone\n"
        "same = [os.environ == env, sys.meta_path == hooks, os.fstat(2) == stderr]\n"
        "from kdist.compat import moved\n"
        "old = kdist.sweep  # a moved module read as an attribute: no hook\n"
        "same.append(sys.meta_path == hooks)\n"
        "kdist.compose(['trainer.epochs=1'])\n"
        "from hydra.utils import get_class\n"
        "found = get_class('kdist.sweep.SummaryCallback').__module__\n"
        "print(json.dumps({'same': same, 'old': old.__name__, 'found': found,\n"
        "                  'installed': moved.installed(), 'tf': 'tensorflow' in sys.modules}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["same"] == [True, True, True, True]
    assert seen["old"] == "kdist.runs.sweep"
    # Composing a config installs the finder of old paths a saved config may name.
    assert seen["installed"] is True
    assert seen["found"] == "kdist.runs.sweep"
    assert seen["tf"] is False


def test_the_package_is_typed_with_classifiers_and_urls():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert (REPO / "kdist" / "py.typed").is_file()
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["kdist"]
    classifiers = project["project"]["classifiers"]
    assert "Typing :: Typed" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX `license`
    # No address that does not exist: the URLs come with a published site (pyproject.toml).
    assert ".invalid" not in str(project["project"].get("urls", {}))


@pytest.mark.parametrize("name", ["evaluate", "predict"])
def test_evaluate_and_predict_answer_help_with_their_manual(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    module = importlib.import_module(f"kdist.{name}")
    monkeypatch.setattr(sys, "argv", [f"kdist {name}", "--help"])
    with pytest.raises(SystemExit) as caught:
        module.main()
    assert caught.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"`kdist {name} run_dir=...`: ")
    assert f"\nkdist {name} run_dir=outputs/" in out and "```" not in out
