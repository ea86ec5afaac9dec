"""Ctrl-C in the first seconds of `kdist train` / `kdist tune` (issue 52, case 5): one line
and status 130 (`EXIT_INTERRUPTED`), never a `KeyboardInterrupt` traceback, wherever the
interrupt lands (TensorFlow's import, Hydra's composition, the run's setup)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kdist.process.exit_codes import EXIT_INTERRUPTED
from kdist.process.interrupt import ctrl_c_kept, exit_on_ctrl_c


def test_an_error_caused_by_ctrl_c_exits_130_with_one_line(capsys):
    """Ctrl-C inside an import can surface as another error (a dataclass's `__set_name__`
    wraps it in a `RuntimeError`); it is still Ctrl-C."""
    with pytest.raises(SystemExit) as raised, exit_on_ctrl_c("kdist.x: interrupted (Ctrl-C)"):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise RuntimeError("Error calling __set_name__") from interrupt
    assert raised.value.code == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "kdist.x: interrupted (Ctrl-C)\n"
    with pytest.raises(ValueError), exit_on_ctrl_c("unused"):
        raise ValueError("an error of its own stays itself")


def _hydra_read_interrupted(*args, **kwargs):
    """Hydra 1.3's config source when Ctrl-C lands in its `open`: its `finally:
    f.close()` raises `UnboundLocalError` over the interrupt (found by test_poor_cli's
    Ctrl-C to `kdist tune`, which then ended with status 1 and Hydra's traceback)."""
    try:
        raise KeyboardInterrupt
    finally:
        raise UnboundLocalError("cannot access local variable 'f'")


def test_an_error_ctrl_c_caused_passes_code_that_catches_exception_as_the_interrupt():
    with pytest.raises(KeyboardInterrupt) as raised, ctrl_c_kept():
        _hydra_read_interrupted()
    assert isinstance(raised.value.__cause__, UnboundLocalError)
    with pytest.raises(ValueError), ctrl_c_kept():
        raise ValueError("an error of its own stays itself")


def test_ctrl_c_while_a_trial_composes_stops_the_search_not_the_trial(monkeypatch):
    """`TrialPlan.compose` (the search's base config, and each trial's) keeps a Ctrl-C in
    Hydra's file reading a `KeyboardInterrupt`: the tuner's trial catches `Exception`
    (a failed trial) and Hydra's job report does too (status 1)."""
    from kdist.config import compose as compose_module
    from kdist.tuning.plan import TrialPlan
    from kdist.tuning.space import Space

    monkeypatch.setattr(compose_module, "compose", _hydra_read_interrupted)
    plan = TrialPlan(space=Space([]), config_name="train")
    with pytest.raises(KeyboardInterrupt):
        plan.compose(["trainer.epochs=1"])


def test_ctrl_c_while_kdist_composes_is_the_interrupt(monkeypatch):
    """`kdist.compose` (a notebook's, and the commands' checks) raises the interrupt, not
    Hydra's `UnboundLocalError` (before: that error, which `kdist launch` took for a command
    line its tasks would report, and `kdist.tune.best_config` for a `best.yaml` that does
    not compose)."""
    from kdist.config import compose as compose_module

    monkeypatch.setattr(compose_module, "hydra_compose", _hydra_read_interrupted)
    with pytest.raises(KeyboardInterrupt) as raised:
        compose_module.compose(["trainer.epochs=1"])
    assert isinstance(raised.value.__cause__, UnboundLocalError)


def test_ctrl_c_while_the_launcher_composes_stops_the_launch(monkeypatch):
    from kdist.config import compose as compose_module
    from kdist.launcher import checks

    monkeypatch.setattr(compose_module, "hydra_compose", _hydra_read_interrupted)
    with pytest.raises(KeyboardInterrupt):
        checks._job_config(["strategy=multi_worker_mirrored"])
    monkeypatch.undo()  # a command line that does not compose: left to the tasks
    assert checks._job_config(["strategy=no_such_strategy"]) is None


def test_ctrl_c_while_a_best_trial_composes_is_no_bad_best_yaml(monkeypatch, tmp_path: Path):
    from kdist.config import compose as compose_module
    from kdist.tuning.results import load_best

    (tmp_path / "best.yaml").write_text("overrides: [trainer.epochs=1]\n")
    monkeypatch.setattr(compose_module, "hydra_compose", _hydra_read_interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_best(tmp_path, trust=True)


@pytest.mark.parametrize("held", [False, True])
def test_ctrl_c_while_train_composes_is_the_interrupt_not_a_config_error(
    monkeypatch, tmp_path: Path, capsys, held: bool
):
    """`kdist train` reports what its composition raises as a config error (status 2):
    an error a Ctrl-C caused is the interrupt instead, through `kdist.compose` (the checks
    alone) or Hydra's app (a run: `_compose_app`). Before: `kdist: config error: cannot
    access local variable 'f'` and status 2 (found by reading the commands after
    `test_poor_cli`'s tune case)."""
    import contextlib

    import kdist.train as train
    from kdist.config import compose as compose_module

    monkeypatch.setattr(compose_module, "hydra_compose", _hydra_read_interrupted)
    monkeypatch.setattr(train, "_compose_app", _hydra_read_interrupted)
    monkeypatch.chdir(tmp_path)
    with contextlib.ExitStack() as stack, pytest.raises(KeyboardInterrupt):
        train.precheck(["trainer.epochs=1"], held=stack if held else None)
    assert "config error" not in capsys.readouterr().err


def test_a_config_error_exit_over_an_interrupt_is_the_interrupt(capsys):
    from kdist.config.errors import ConfigError, exit_with

    with pytest.raises(KeyboardInterrupt):
        try:
            _hydra_read_interrupted()
        except Exception:
            exit_with("a line made of the error")

    def locate() -> None:  # as `kdist.config.targets` says an import that failed
        try:
            _hydra_read_interrupted()
        except Exception as error:
            raise ConfigError("model._target_", "is not importable") from error

    with pytest.raises(KeyboardInterrupt):
        try:
            locate()
        except ConfigError as error:
            exit_with(error)
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as raised:
        exit_with(ConfigError("trainer.epochs", "must be positive", value=0))
    assert raised.value.code == 2
    assert capsys.readouterr().err == "kdist: config error: trainer.epochs=0: must be positive\n"


def test_ctrl_c_while_a_target_imports_is_the_interrupt_and_no_second_import(monkeypatch):
    """A Ctrl-C in the import a `_target_` names (TensorFlow's, under `keras.optimizers`)
    surfaces as an `ImportError`: before, kdist took it for a target that does not import,
    imported it again to look for a hypermodel (unfiltered, so TensorFlow's start-up lines
    reached stderr) and said so (found by make test: 7 lines where one was due)."""
    from kdist.config import targets

    def import_interrupted(path: str):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as error:
            raise ImportError("initialization failed") from error

    def imported_again(path: str):
        raise AssertionError(f"{path} imported again")

    monkeypatch.setattr(targets, "get_method", import_interrupted)
    monkeypatch.setattr(targets, "hydra_locate", imported_again)
    with pytest.raises(KeyboardInterrupt):
        targets.check_target_keys("optimizer", {"_target_": "keras.optimizers.Adam"})


def test_an_interrupted_tensorflow_import_is_filtered_again_when_retried(monkeypatch):
    import importlib.machinery
    import types

    from kdist.process import quiet

    class Interrupted:
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            raise KeyboardInterrupt

    spec = importlib.machinery.ModuleSpec("tensorflow", Interrupted())
    monkeypatch.setattr(importlib.machinery.PathFinder, "find_spec", lambda *a, **k: spec)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    finder = quiet._QuietImport()
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    found = finder.find_spec("tensorflow", None)
    assert finder not in sys.meta_path  # removed on first use
    with pytest.raises(KeyboardInterrupt):
        found.loader.exec_module(types.ModuleType("tensorflow"))
    assert any(isinstance(f, quiet._QuietImport) for f in sys.meta_path)  # armed again


def _interrupt_after(seconds: float, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`python -m kdist ARGS`, SIGINT after `seconds` (its imports take longer than that)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kdist", *args],
        cwd=cwd,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell's background job ignores SIGINT; a terminal's Ctrl-C does not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
        # On a loaded machine the interrupt can land after the imports, where the run's
        # preemption handler stops it at its next step with the same line: allow for that.
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.parametrize("command", ["train", "tune"])
@pytest.mark.parametrize("seconds", [0.8, 2.0])
def test_ctrl_c_in_the_first_seconds_prints_one_line_and_exits_130(
    tmp_path: Path, command: str, seconds: float
):
    result = _interrupt_after(seconds, [command, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    # 130, or killed by SIGINT, which a shell reports as 130 too: CPython ends a process
    # by SIGINT itself when the interrupt went through a C extension's `PyRun_*` call
    # (its "unhandled keyboard interrupt" flag stays set though kdist handled it).
    assert result.returncode in (EXIT_INTERRUPTED, -signal.SIGINT), result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert "interrupted (Ctrl-C)" in lines[0]
    assert lines[0].startswith(f"kdist {command}: ") or lines[0].startswith(f"kdist.{command}: ")


_SIGINT_AT_IMPORT = """
import os, signal, sys
class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["INTERRUPT_AT_IMPORT"]:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as this module is imported
        return None
sys.meta_path.insert(0, _Finder())
"""


@pytest.mark.parametrize(
    ("module", "imported"),
    [("kdist.train", "hydra"), ("kdist.train", "omegaconf"), ("kdist.tune", "hydra")],
)
def test_ctrl_c_in_the_imports_of_python_m_kdist_command_is_one_line(
    tmp_path: Path, module: str, imported: str
):
    """`python -m kdist.train` (not `kdist train`): the interrupt lands in the module's own
    imports, before its `main` runs; placed there by an import hook, not by timing."""
    (tmp_path / "sitecustomize.py").write_text(_SIGINT_AT_IMPORT)
    result = subprocess.run(
        [sys.executable, "-m", module, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "INTERRUPT_AT_IMPORT": imported},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode in (EXIT_INTERRUPTED, -signal.SIGINT), result.stderr[-3000:]
    assert result.stderr == f"{module}: interrupted (Ctrl-C) while starting\n"
    assert not (tmp_path / "run").exists()


def test_other_errors_keep_their_traceback(tmp_path: Path):
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nclass F:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'hydra':\n            raise ValueError('not an interrupt')\n"
        "sys.meta_path.insert(0, F())\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "kdist.train"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ValueError: not an interrupt" in result.stderr
