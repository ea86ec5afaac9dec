"""Trust on what will run, one owner per folder, YAML within limits (issue 38's BAD 1, 2/3
for the sidecar and kdist.predict, 6 and 7).

Each hostile input is refused in one line naming the key, with status 2, before anything
runs or is written: the folder it aims at survives, the run folder is unchanged.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml
from helpers import REPO, run_module

from kdist import evaluate, predict
from kdist.config.errors import ConfigError
from kdist.config.yaml_limits import MAX_BYTES, check_yaml_text, load_config
from kdist.evaluation import sidecar
from kdist.runs import lock as run_lock
from kdist.runs.layout import EVAL_LOCK

RMTREE = "${oc.decode:'{_target_: kdist.data.files.tf.io.gfile.rmtree, _args_: [%s]}'}"


def _bomb(levels: int = 9) -> str:
    """A nested-alias bomb of about 490 bytes: 9**levels leaves once expanded."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _run_folder(tmp_path: Path, text: str) -> tuple[Path, Path]:
    victim = tmp_path / "X"
    victim.mkdir()
    (victim / "keep").write_text("keep me\n")
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(text.replace("VICTIM", str(victim)))
    return run_dir, victim


def _one_line_exit_2(capsys, call) -> str:
    with pytest.raises(SystemExit) as stopped:
        call()
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_oc_decode_rmtree_is_refused_by_every_reader(tmp_path: Path, capsys):
    text = yaml.safe_dump({"data": {"source": RMTREE % "VICTIM"}})
    run_dir, victim = _run_folder(tmp_path, text)
    before = sorted(p.name for p in run_dir.rglob("*"))
    for call in (
        lambda: evaluate.main([f"run_dir={run_dir}"]),
        lambda: predict.main([f"run_dir={run_dir}"]),
        lambda: evaluate.main([f"run_dir={run_dir}", "watch=true", "poll_seconds=0.05"]),
    ):
        line = _one_line_exit_2(capsys, call)
        assert line.startswith("kdist: config error: data.source._target_="), line
        assert "trust_run_dir=true" in line
        assert (victim / "keep").read_text() == "keep me\n"
    assert sorted(p.name for p in run_dir.rglob("*")) == before  # no lock, nothing written


def test_oc_decode_rmtree_is_refused_by_python_m_kdist_evaluate(tmp_path: Path):
    text = yaml.safe_dump({"data": {"source": RMTREE % "VICTIM"}})
    run_dir, victim = _run_folder(tmp_path, text)
    result = run_module(
        "kdist.evaluate", [f"run_dir={run_dir}"], cwd=tmp_path, env={"PYTHONPATH": str(REPO)}
    )
    assert result.returncode == 2, result.stderr[-2000:]  # EXIT_CONFIG_ERROR
    errors = [line for line in result.stderr.splitlines() if line.startswith("kdist:")]
    assert len(errors) == 1 and "data.source._target_" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert (victim / "keep").read_text() == "keep me\n"


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("${oc.env:HOME}", "resolver 'oc.env'"),
        ("${hydra:runtime.cwd}", "resolver 'hydra'"),
        ("${no_such_resolver:1}", "resolver 'no_such_resolver'"),
        ("\\${oc.env:HOME}", "holding an interpolation"),
        ("${oc.create:{_target_: shutil.rmtree, _args_: [VICTIM]}}", r"_target_='shutil.rmtree'"),
    ],
)
def test_interpolations_through_refused_resolvers_name_their_key(tmp_path, capsys, value, match):
    run_dir, victim = _run_folder(tmp_path, yaml.safe_dump({"model": {"hidden": [value]}}))
    line = _one_line_exit_2(capsys, lambda: evaluate.main([f"run_dir={run_dir}"]))
    assert line.startswith("kdist: config error: model.hidden[0]"), line
    assert re.search(match, line), line
    assert (victim / "keep").is_file()


def test_an_alias_bomb_in_a_run_folder_is_refused_at_once(tmp_path: Path, capsys):
    run_dir, _ = _run_folder(tmp_path, "data: {source: x}\n" + _bomb())
    assert len(_bomb()) < 500
    started = time.monotonic()
    line = _one_line_exit_2(capsys, lambda: evaluate.main([f"run_dir={run_dir}"]))
    assert time.monotonic() - started < 5
    assert line.startswith("kdist: config error: run_dir: ") and "alias" in line, line


def test_yaml_limits_refuse_size_depth_cycles_and_accept_configs(tmp_path: Path):
    with pytest.raises(ConfigError, match="larger than"):
        check_yaml_text("a: " + "x" * (MAX_BYTES + 1), key="k", where="f")
    with pytest.raises(ConfigError, match="nests deeper"):
        check_yaml_text("[" * 5000 + "]" * 5000, key="k", where="f")
    with pytest.raises(ConfigError, match="refers to the node containing it"):
        check_yaml_text("a: &a [1, *a]", key="k", where="f")
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:  # a sparse file: its size is refused before a byte is read
        handle.truncate(MAX_BYTES + 1)
    with pytest.raises(ConfigError, match=r"^k: .*big\.yaml is larger than"):
        load_config(big, key="k")
    for recipe in sorted((REPO / "recipes").glob("*.yaml")):
        check_yaml_text(recipe.read_text(), key="k", where=str(recipe))
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: ${oc.decode:'x\n")
    with pytest.raises(ConfigError, match="does not read as a config"):
        load_config(broken, key="run_dir")


def test_an_alias_bomb_recipe_is_refused_before_hydra_reads_it(tmp_path: Path, capsys):
    from kdist.train import precheck

    (tmp_path / "bomb.yaml").write_text("defaults: [train, _self_]\n" + _bomb())
    started = time.monotonic()
    for flags in (["-cd", str(tmp_path)], ["--config-path", str(tmp_path)]):
        line = _one_line_exit_2(capsys, lambda f=flags: precheck([*f, "-cn", "bomb"]))
        assert line.startswith("kdist: config error: config_dir: ") and "bomb.yaml" in line
    assert time.monotonic() - started < 10


def test_an_absolute_config_path_is_in_the_search_path_of_its_errors(tmp_path: Path, capsys):
    from kdist.train import precheck

    line = _one_line_exit_2(
        capsys, lambda: precheck(["--config-path", str(tmp_path), "-cn", "nope"])
    )
    assert f"file://{tmp_path}" in line and "pkg://kdist.conf" in line, line


# -- BAD 7: the sidecar with nothing to watch --------------------------------------------------


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_the_sidecar_says_at_once_and_gives_up(tmp_path: Path, capsys, monkeypatch, where):
    monkeypatch.setattr(sidecar, "IDLE_SECONDS", 0.3)
    run_dir = tmp_path / "no" / "such" / "dir"
    if where == "empty":
        run_dir.mkdir(parents=True)
    started = time.monotonic()
    with pytest.raises(SystemExit) as stopped:
        evaluate.main([f"run_dir={run_dir}", "watch=true", "poll_seconds=0.05"])
    assert stopped.value.code == 2
    assert time.monotonic() - started < 10
    out, err = capsys.readouterr()
    said = [line for line in out.splitlines() if line.startswith("[sidecar]")]
    assert len(said) == 1 and ("does not exist" if where == "missing" else "is empty") in said[0]
    errors = err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("kdist: config error: run_dir="), errors
    assert run_dir.exists() == (where == "empty")  # nothing created
    if where == "empty":
        assert list(run_dir.iterdir()) == []


def test_the_sidecar_gives_up_at_its_timeout(tmp_path: Path):
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"^run_dir="):
        sidecar.watch(tmp_path, poll_seconds=0.05, timeout=0.3)
    assert time.monotonic() - started < 5


def test_the_sidecar_refuses_a_file_as_run_dir(tmp_path: Path):
    file = tmp_path / "passwd"
    file.write_text("root:x:0:0\n")
    with pytest.raises(ConfigError, match="is a file, not a run folder"):
        sidecar.watch(file, poll_seconds=0.05, timeout=1)


# -- one owner per folder: the sidecar and kdist.predict --------------------------------------


def _plain_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(
        yaml.safe_dump({"strategy": {"_target_": "kdist.strategies.one_device"}})
    )
    return run_dir


def test_predict_into_a_folder_another_process_holds_is_refused(tmp_path: Path, monkeypatch):
    run_dir = _plain_run(tmp_path)
    reached: list[str] = []
    monkeypatch.setattr(predict, "_predict_into", lambda *a: reached.append("wrote"))
    with run_lock.hold(run_dir), pytest.raises(ConfigError, match=r"^run_dir=.*is in use"):
        predict.predict_run(run_dir)
    assert reached == []
    predict.predict_run(run_dir)  # free again: it holds the lock itself while it writes
    assert reached == ["wrote"]
    # Writing elsewhere, it does not own the run folder.
    with run_lock.hold(run_dir):
        predict.predict_run(run_dir, output_path=str(tmp_path / "elsewhere.npz"))
    assert reached == ["wrote", "wrote"]


def test_predict_holds_the_folder_while_it_writes(tmp_path: Path, monkeypatch):
    run_dir = _plain_run(tmp_path)

    def while_writing(*args):
        with pytest.raises(ConfigError, match="is in use"):
            run_lock.check_free(run_dir)  # what kdist.train and kdist.tune check first

    monkeypatch.setattr(predict, "_predict_into", while_writing)
    predict.predict_run(run_dir)


def test_one_sidecar_per_folder(tmp_path: Path, monkeypatch):
    run_dir = _plain_run(tmp_path)
    monkeypatch.setattr(sidecar, "_evaluate_checkpoints", lambda *a, **k: [])
    with (
        run_lock.hold(run_dir, key="run_dir", name=EVAL_LOCK),
        pytest.raises(ConfigError, match=r"^run_dir=.*in use by another kdist process"),
    ):
        sidecar.watch(run_dir, poll_seconds=0.05, timeout=1)
    # A training run's own lock does not keep its sidecar out.
    with run_lock.hold(run_dir):
        assert sidecar.watch(run_dir, poll_seconds=0.05, timeout=1) == []


def test_a_huge_recipe_is_refused_by_its_size_before_it_is_read(tmp_path: Path, capsys):
    from kdist.train import precheck

    with (tmp_path / "huge.yaml").open("wb") as handle:  # sparse: nothing to write
        handle.truncate(2 * 2**30)  # the 2 GB string
    started = time.monotonic()
    line = _one_line_exit_2(capsys, lambda: precheck(["-cd", str(tmp_path), "-cn", "huge"]))
    assert time.monotonic() - started < 10
    assert "huge.yaml is larger than 8 MiB" in line, line


def test_a_resumed_run_reads_its_saved_config_within_limits_and_safe_resolvers(tmp_path: Path):
    from omegaconf import OmegaConf

    from kdist.runs import resume_check

    run_dir = tmp_path / "run"
    (run_dir / "backup").mkdir(parents=True)
    (run_dir / "backup" / "ckpt-1.index").write_bytes(b"")
    saved = run_dir / "backup" / "config.yaml"
    new = OmegaConf.create({"trainer": {"epochs": 1}, "secret": "${oc.env:HOME}"})
    saved.write_text("trainer: {epochs: 1}\n" + _bomb())
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"^hydra\.run\.dir: .*alias bomb"):
        resume_check.check_resume(run_dir, new)
    assert time.monotonic() - started < 5
    # oc.env is not resolved for the comparison: compared as written, so it matches.
    saved.write_text("trainer: {epochs: 1}\nsecret: ${oc.env:HOME}\n")
    resume_check.check_resume(run_dir, new)


def test_evaluate_names_a_file_given_as_run_dir(tmp_path: Path, capsys):
    file = tmp_path / "passwd"
    file.write_text("root:x:0:0\n")
    line = _one_line_exit_2(capsys, lambda: evaluate.main([f"run_dir={file}"]))
    assert line.startswith(f"kdist: config error: run_dir='{file}': is a file, not a run folder")
