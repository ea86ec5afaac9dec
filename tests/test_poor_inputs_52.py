"""Issue 52's hostile inputs: overrides, data and model checks, the command surface.

Each bad input is one line with status 2 (`kdist.process.exit_codes`), no traceback.
Cost: ~25 s (a few `python -m kdist` processes that stop before TensorFlow starts, one tiny
search in this process).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from helpers import LOGICAL, REPO, SMALL_JOB, compose

import kdist
from kdist import command
from kdist.config.errors import ConfigError
from kdist.config.path_limits import FILES_ROOM, check_path_length
from kdist.data.checks import check_class_ids, is_one_hot
from kdist.engine import runner
from kdist.experiment.build import check_targets
from kdist.modeling.compiling import check_logits, takes_logits
from kdist.process.exit_codes import EXIT_CONFIG_ERROR
from kdist.runs.layout import check_run_dir
from kdist.tuning import run as run_search

GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"


def _kdist(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kdist", *args],
        cwd=REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == EXIT_CONFIG_ERROR, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- 1. a full-width digit, a zero-width space, a right-to-left override -------------------


@pytest.mark.parametrize(
    ("override", "named", "plain"),
    [
        (
            "trainer.epochs=\uff13",
            "U+FF13 FULLWIDTH DIGIT THREE at character 16 (in the value)",
            "trainer.epochs=3",
        ),
        (
            "trainer.epochs=1\u200b",
            "U+200B ZERO WIDTH SPACE at character 17 (in the value)",
            "trainer.epochs=1",
        ),
        (
            "trainer.ep\u200bochs=1",
            "U+200B ZERO WIDTH SPACE at character 11 (in the key)",
            "trainer.epochs=1",
        ),
        (
            "model=m\u202elp",
            "U+202E RIGHT-TO-LEFT OVERRIDE at character 8 (in the value)",
            "model=mlp",
        ),
    ],
    ids=["full-width", "zero-width-value", "zero-width-key", "right-to-left"],
)
def test_an_odd_character_in_an_override_is_named(override: str, named: str, plain: str):
    with pytest.raises(ConfigError) as caught:
        compose([override])
    text = str(caught.value)
    assert named in text and f"type it plainly: {plain}" in text, text
    assert "\n" not in text
    # Shown escaped: a right-to-left override would reorder the line in the terminal.
    assert "\u202e" not in text and "\u200b" not in text


def test_a_visible_character_may_be_quoted_instead():
    with pytest.raises(ConfigError) as caught:
        compose(["trainer.epochs=\uff13"])
    assert "or quote the value to keep the text as it is: 'trainer.epochs=\"\uff13\"'" in str(
        caught.value
    )
    # As the line says: quoted, Hydra reads it (and `int` the full-width digit).
    assert compose(["trainer.epochs='\uff13'"]).trainer.epochs == 3


@pytest.mark.parametrize("multirun", [False, True], ids=["run", "multirun"])
def test_an_odd_character_is_one_line_on_the_command_line(tmp_path: Path, multirun: bool):
    flags = ["-m", f"hydra.sweep.dir={tmp_path}"] if multirun else [f"hydra.run.dir={tmp_path}"]
    line = _one_line(_kdist("train", *flags, "trainer.epochs=\uff13"))
    assert "U+FF13 FULLWIDTH DIGIT THREE" in line and "trainer.epochs=3" in line


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("trainer.epochs=[1,2", "trainer.epochs='[1,2': is not an override Hydra can read"),
        ("model.name='mlp", 'model.name="\'mlp": is not an override Hydra can read'),
        ("trainer.epochs", "trainer.epochs: is not an override Hydra can read"),
        ("trainer.epochs=1=2", "trainer.epochs='1=2': is not an override Hydra can read"),
    ],
    ids=["open-bracket", "open-quote", "no-equals", "two-equals"],
)
def test_an_override_hydra_cannot_parse_names_its_key(override: str, said: str):
    with pytest.raises(ConfigError) as caught:
        compose([override])
    text = str(caught.value)
    assert text.startswith(said) and "\n" not in text, text
    hints = {"[": "close its '[' with ']'", "'": "close its quote", "=1=": "quote the value"}
    assert any(h in text for k, h in hints.items() if k in override) or "key=value" in text


def test_a_multirun_with_an_unclosed_list_is_one_line_before_any_job(tmp_path: Path):
    # Hydra's basic sweeper parsed it itself: four lines of its own and status 1.
    line = _one_line(_kdist("train", "-m", f"hydra.sweep.dir={tmp_path}", "trainer.epochs=[1,2"))
    assert line.startswith("kdist: config error: trainer.epochs='[1,2': is not an override")
    assert line.endswith("close its '[' with ']' (the grammar: " + GRAMMAR + ")")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


# --- 2. a 100,000-digit whole number ---------------------------------------------------------


def test_a_100000_digit_number_names_its_key(tmp_path: Path):
    with pytest.raises(ConfigError) as caught:
        compose(["trainer.epochs=" + "9" * 100_000])
    assert str(caught.value).startswith(
        "trainer.epochs: its value holds a whole number of 100000 digits"
    )
    line = _one_line(
        _kdist("train", f"hydra.run.dir={tmp_path}", "trainer.epochs=" + "9" * 100_000)
    )
    assert line.startswith("kdist: config error: trainer.epochs: ") and len(line) < 300


# --- 3. a 300-character run folder -----------------------------------------------------------


def test_a_run_folder_name_over_the_file_systems_limit_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError) as caught:
        check_run_dir("hydra.run.dir", tmp_path / ("a" * 300))  # it raised OSError
    assert str(caught.value).startswith("hydra.run.dir: its part 'aaaaaaaaaaaa...aaaaaaaa' is")


def test_a_sweep_folder_over_the_file_systems_limit_is_one_line(tmp_path: Path):
    long = tmp_path / ("a" * 300)
    line = _one_line(_kdist("train", "-m", "trainer.epochs=1,2", f"hydra.sweep.dir={long}"))
    assert "hydra.sweep.dir: its part 'aaaaaaaaaaaa...aaaaaaaa' is 300 bytes long" in line


def test_a_notebook_run_dir_over_the_file_systems_limit_is_refused(tmp_path: Path):
    cfg = compose(["callbacks=minimal"])
    with pytest.raises(ConfigError, match=r"^run_dir: its part 'aaaaaaaaaaaa\.\.\.aaaaaaaa'"):
        kdist.Experiment(cfg, run_dir=tmp_path / ("a" * 300))  # it raised OSError


def test_a_run_folder_name_over_the_file_systems_limit_is_one_line(tmp_path: Path):
    line = _one_line(_kdist("train", f"hydra.run.dir={tmp_path / ('a' * 300)}"))
    assert "hydra.run.dir: its part 'aaaaaaaaaaaa...aaaaaaaa' is 300 bytes long" in line
    assert "at most 255 bytes" in line
    assert not (tmp_path / ("a" * 10)).exists()


def test_a_run_folder_path_leaves_room_for_kdists_files(tmp_path: Path):
    parts = tmp_path.joinpath(*["b" * 200] * 21)
    with pytest.raises(ConfigError, match=r"^hydra\.run\.dir: is \d+ bytes long .*at most 4096"):
        check_path_length("hydra.run.dir", parts)
    check_path_length("hydra.run.dir", tmp_path / ("c" * 255))  # at the limit: fine
    assert len("tensorboard/validation/events.out.tfevents.") + 64 < FILES_ROOM


# --- 4. an empty .npz ------------------------------------------------------------------------


def test_an_npz_with_no_arrays_is_named_empty(tmp_path: Path):
    np.savez(tmp_path / "none.npz")
    with pytest.raises(ConfigError) as caught:
        kdist.data.npz(path=str(tmp_path / "none.npz"))
    text = str(caught.value)
    assert text.startswith("data.source.path=") and "none.npz" in text
    assert "is empty: it holds no arrays" in text


def test_an_npz_of_zero_rows_is_named_empty_not_the_split(tmp_path: Path):
    np.savez(tmp_path / "zero.npz", x=np.zeros((0, 4), "float32"), y=np.zeros((0,), "int64"))
    with pytest.raises(ConfigError) as caught:
        kdist.data.npz(path=str(tmp_path / "zero.npz"))
    text = str(caught.value)
    assert caught.value.key == "data.source.path" and "zero.npz" in text
    assert "is empty: its array 'x' has 0 rows" in text and "validation_fraction" not in text
    np.savez(tmp_path / "ok.npz", x=np.zeros((8, 4), "float32"), y=np.arange(8) % 2)
    with pytest.raises(ConfigError, match=r"^data\.source\.validation_path=.*is empty"):
        kdist.data.npz(path=str(tmp_path / "ok.npz"), validation_path=str(tmp_path / "zero.npz"))


# --- 5. one-hot labels with a sparse loss ----------------------------------------------------


def test_one_hot_labels_with_a_sparse_loss_advise_categorical(tmp_path: Path):
    y = np.eye(3, dtype="float32")[np.arange(12) % 3]
    np.savez(tmp_path / "onehot.npz", x=np.zeros((12, 4), "float32"), y=y)
    source = kdist.data.npz(path=str(tmp_path / "onehot.npz"), validation_fraction=0.25)
    with pytest.raises(ConfigError) as caught:
        check_targets(None, source)  # kdist's default loss: sparse, from logits
    text = str(caught.value)
    assert (
        "one-hot rows (3 columns)" in text and "CategoricalCrossentropy, from_logits: true" in text
    )
    assert "mse" not in text
    with pytest.raises(ConfigError) as caught:
        check_targets("sparse_categorical_crossentropy", source)
    assert "use trainer.loss=categorical_crossentropy" in str(caught.value)
    # Integer one-hot rows too (they failed inside TensorFlow, status 1).
    with pytest.raises(ConfigError, match="one-hot rows"):
        check_class_ids("trainer.loss", y.astype("int64"), loss="x", from_logits=True)
    # Float regression targets still get the regression advice.
    with pytest.raises(ConfigError, match=r"trainer\.loss=mse"):
        check_class_ids("trainer.loss", np.linspace(0, 1, 12), loss="x", from_logits=True)
    assert not is_one_hot(np.array([[0.2, 0.8]])) and is_one_hot(np.array([[0, 1], [1, 0]]))


# --- 6. a softmax model trained with a loss that takes logits ----------------------------------


def softmax_model(*, input_shape, num_classes):
    """A keras.io-style classifier that ends in softmax (probabilities, not logits)."""
    return keras.Sequential(
        [
            keras.Input(input_shape),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(num_classes, activation="softmax", name="probs"),
        ]
    )


def test_which_losses_take_logits():
    assert takes_logits(None)  # kdist's default loss
    assert takes_logits({"_target_": "keras.losses.BinaryCrossentropy", "from_logits": True})
    assert not takes_logits("sparse_categorical_crossentropy")
    assert not takes_logits({"_target_": "keras.losses.SparseCategoricalCrossentropy"})


def test_a_softmax_model_with_a_logits_loss_is_refused_before_training(tmp_path: Path):
    cfg = compose(
        [
            *(o for o in SMALL_JOB if not o.startswith("model")),
            LOGICAL,
            "model=custom",
            "model._target_=test_poor_inputs_52.softmax_model",
            f"run_dir={tmp_path}",
        ]
    )
    with pytest.raises(ConfigError) as caught:
        kdist.Experiment(cfg).build_model()
    text = str(caught.value)
    assert caught.value.key == "trainer.loss" and "from_logits=True" in text
    assert "output layer 'probs' ends in softmax" in text
    assert "trainer.loss=sparse_categorical_crossentropy" in text and "\n" not in text
    # With the loss it advises, the same model compiles.
    model = softmax_model(input_shape=(4,), num_classes=3)
    check_logits(model, "sparse_categorical_crossentropy")
    logits = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    check_logits(logits, None)


# --- 7. kdist.tune after `import kdist` -------------------------------------------------------


def test_kdist_tune_is_an_attribute_of_kdist_without_tensorflow():
    code = (
        "import sys, kdist\n"
        "tune = kdist.tune\n"
        "print('tensorflow' in sys.modules, tune.__name__, 'best_config' in tune.__all__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    tensorflow, name, has_best = done.stdout.split()[-3:]
    assert name == "kdist.tune" and has_best == "True"
    assert tensorflow == "False"  # `kdist.tune` itself leaves TensorFlow for first use
    # As the docs show it: `kdist.tune.best_config(search_dir)`.
    from kdist.tuning.results import load_best

    assert kdist.tune.best_config is load_best


# --- 8. the default search warns about no callback of kdist's own ------------------------------


def test_a_default_search_logs_no_batch_hook_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    monkeypatch.setattr(runner, "_said", set())  # said once per process
    overrides = [
        "trainer=fast_dev",
        "trainer.epochs=1",
        "trainer.steps_per_execution=5",  # more than 1: where batch hooks are noted
        "trainer.verbose=0",
        "callbacks=minimal",
        "tuner.verbose=0",
        "tuner.max_trials=1",
    ]
    cfg = compose(overrides, config_name="tune")
    with caplog.at_level(logging.WARNING):
        result = run_search(cfg, run_dir=tmp_path / "search", overrides=[LOGICAL, *overrides])
    assert result.best is not None
    noted = [r.getMessage() for r in caplog.records if "not every step" in r.getMessage()]
    assert noted == []
    assert not [r for r in caplog.records if "TerminateOnNaN" in r.getMessage()]


# --- 9. `kdist help <command>`, and `kdist launch --<TAB>` -----------------------------------


# Each command's help through `kdist help NAME` and `kdist NAME --help`, in one child process:
# Hydra's help path sets Hydra's global config and its logging in the process that runs
# it (a command's own process, which then exits), and tests after it in this process
# would inherit both.
_HELPS = """
import contextlib, io, json
from kdist import command
out = {}
for name in command.COMMANDS:
    out[name] = []
    for argv in (["help", name], [name, "--help"]):
        text, code = io.StringIO(), "none"
        with contextlib.redirect_stdout(text):
            try:
                command.main(argv)
            except SystemExit as exit:
                code = exit.code
        out[name].append([code, text.getvalue()])
print("HELPS" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, list[list]]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", _HELPS], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.rpartition("HELPS")[2])


@pytest.mark.parametrize("name", list(command.COMMANDS))
def test_kdist_help_command_prints_that_commands_help(name: str, helps):
    (code, helped), (_, direct) = helps[name]
    assert code in (0, None)
    assert helped.strip() and helped == direct


def test_kdist_help_alone_is_the_overview_and_an_unknown_command_is_one_line(capsys):
    with pytest.raises(SystemExit) as caught:
        command.main(["help"])
    assert caught.value.code == 0 and capsys.readouterr().out.strip() == command.usage()
    assert "kdist help <command>" in command.usage()
    with pytest.raises(SystemExit) as caught:
        command.main(["help", "trian"])
    assert caught.value.code == EXIT_CONFIG_ERROR
    assert "unknown command 'trian' (did you mean 'train'?)" in capsys.readouterr().err


def test_launch_flags_complete(monkeypatch: pytest.MonkeyPatch, capsys):
    def answer(line: str) -> list[str]:
        monkeypatch.setenv("COMP_LINE", line)
        command.main(["-sc", "query=bash"])
        return capsys.readouterr().out.split()

    assert answer("kdist launch --wo") == ["--workers"]
    flags = answer("kdist launch --workers 2 --")
    assert {"--workers", "--ps", "--max-restarts", "--run-dir", "--no-isolation"} <= set(flags)
    assert answer("kdist launch ") == []  # not a flag: the shell's file names
    # After `--`, the training overrides, as `kdist train` completes them.
    assert answer("kdist launch --workers 2 -- strategy=mi") == ["strategy=mirrored"]
    assert answer("kdist he") == ["help"]
    assert answer("kdist help t") == list(command.COMMANDS)


def test_a_hydra_config_without_a_jobs_folder_is_no_hydra_job():
    """Hydra's help path (`kdist help train` in a process) leaves a config with no job's
    output folder: a notebook's run after it failed on `hydra.runtime.output_dir`."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from kdist.train import hydra_output_dir

    instance = HydraConfig.instance()
    kept = instance.cfg
    try:
        instance.cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": "???"}}})
        assert hydra_output_dir() is None
        instance.cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": "/x/y"}}})
        assert hydra_output_dir() == "/x/y"
    finally:
        instance.cfg = kept
