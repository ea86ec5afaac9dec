"""Chaos: kill -9 of a random task of a 2-worker run at a random step, then relaunch.

Five rounds with a fixed seed. Each round must end with the weights of an uninterrupted
run (1e-6), no process of either launch left (checked by pid) and no scratch folder left.
About 3 minutes on 2 cores.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, alive, launch_pids, start_launch

from kdist.cluster.chief import scratch_prefix
from kdist.launch import run

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SEED = 1313
ROUNDS = 5
STEPS = 20
JOB = [
    "strategy=multi_worker_mirrored",
    "model.units=[16]",
    "trainer.epochs=2",
    f"trainer.steps_per_epoch={STEPS // 2}",
    "trainer.global_batch_size=32",
    "trainer.steps_per_execution=1",
    "trainer.verbose=2",
    "runtime.deterministic=true",
    "callbacks.tensorboard.enabled=false",
    "callbacks.curves=false",
    "callbacks.backup.every_n_steps=3",
]


def _weights(run_dir: Path) -> list[np.ndarray]:
    import keras

    return [np.asarray(w) for w in keras.models.load_model(run_dir / "model.keras").get_weights()]


def _scratch(run_dir: Path) -> list[Path]:
    found = []
    for index in (0, 1):
        prefix = Path(scratch_prefix(run_dir, "worker", index))
        found += list(prefix.parent.glob(f"{prefix.name}*"))
    return found


def _launch(tmp_path: Path, run_dir: Path, extra: list[str]) -> tuple[int | None, list[int], str]:
    """One launch until it ends (bounded): its exit status, its pids and the tasks', output."""
    launcher = start_launch(
        ["--workers", "2", "--run-dir", str(run_dir), "--", *JOB, *extra], cwd=tmp_path
    )
    try:
        text, _ = launcher.communicate(timeout=300)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)
            assert launcher.stdout is not None
            launcher.stdout.close()
    return launcher.returncode, [launcher.pid, *launch_pids(text).values()], text


def _gone(pids, seconds: float = 30) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


@pytest.fixture(autouse=True)
def _tests_importable(monkeypatch):
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])
    )


def test_five_rounds_of_kill_9_then_relaunch_lose_nothing(tmp_path: Path):
    log = io.StringIO()
    reference_dir = tmp_path / "reference"
    assert run(2, JOB, run_dir=reference_dir, timeout=300, output=log) == 0, log.getvalue()
    reference = _weights(reference_dir)
    rng = random.Random(SEED)
    victims = ["worker 0", "worker 1", "launcher"]
    plan = [(rng.choice(victims), rng.randint(2, STEPS - 2)) for _ in range(ROUNDS)]
    for number, (victim, step) in enumerate(plan):
        run_dir = tmp_path / f"round{number}"
        once = tmp_path / f"killed-{number}"
        index = 0 if victim == "launcher" else int(victim[-1])
        kill = (
            f"callbacks.extra=[{{_target_: helpers.KillAtStep, step: {step}, "
            f"once_file: '{once}', only_worker: {index}, parent: {victim == 'launcher'}}}]"
        )
        first, first_pids, text = _launch(tmp_path, run_dir, [kill])
        where = f"round {number}: kill -9 of {victim} at step {step}"
        assert once.exists(), f"{where}: nothing was killed\n{text[-3000:]}"
        assert first == (-signal.SIGKILL if victim == "launcher" else 137), f"{where}\n{text}"
        assert not _gone(first_pids), f"{where}: left running"
        second, second_pids, text = _launch(tmp_path, run_dir, [kill])
        assert second == 0, f"{where}: relaunch\n{text[-3000:]}"
        assert json.loads((run_dir / "metrics.json").read_text())["steps"] == STEPS
        worst = max(
            float(np.max(np.abs(a - b))) for a, b in zip(_weights(run_dir), reference, strict=True)
        )
        assert worst < 1e-6, f"{where}: weights differ by {worst}"
        assert not _gone(second_pids), f"{where}: left running"
        assert not _scratch(run_dir), f"{where}: scratch left"
        assert not list(run_dir.glob("backup/*_temp*")), f"{where}: temp files left"


# -- the run folder's own chaos (issue 31): one process, every way a round can go wrong ----

FOLDER_JOB = [
    "trainer.epochs=3",
    "trainer.steps_per_epoch=12",
    "trainer.global_batch_size=32",
    "trainer.steps_per_execution=1",
    "trainer.verbose=0",
    "runtime.deterministic=true",
    "callbacks.curves=false",
    "callbacks.backup.every_n_steps=5",
    "callbacks.backup.keep=3",
    "callbacks.checkpoint.every_n_steps=4",
    "callbacks.checkpoint.keep=3",
    "hydra.run.dir=run",
]


def _completed(run_dir: Path) -> dict[str, bytes]:
    """Every file of every complete checkpoint (an index present) in the run folder."""
    files = {}
    for folder in ("backup", "checkpoints"):
        for index in (run_dir / folder).glob("ckpt-*.index"):
            for part in index.parent.glob(f"{index.stem}.*"):
                files[f"{folder}/{part.name}"] = part.read_bytes()
    return files


def _folder_bytes(run_dir: Path) -> dict[str, bytes | str]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes() if p.is_file() else "/"
        for p in sorted(run_dir.rglob("*"))
    }


def _readable(prefix: Path, where: str) -> None:
    """Every tensor of checkpoint `prefix` reads (a cut or mixed save would not)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)
    assert reader.get_variable_to_shape_map(), f"{where}: {prefix} holds nothing"


def test_no_round_of_run_folder_chaos_loses_a_completed_checkpoint(tmp_path: Path):
    """Kills at random steps, refused reruns (other settings, a folder in use), a corrupt
    newest backup: after each, every completed checkpoint not rotated out by `keep` is
    byte for byte as it was, and the run ends with an uninterrupted run's weights (about
    3 minutes on 2 cores)."""
    from helpers import run_module

    from kdist.runs import lock as run_lock

    env = {"PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "tests")))}
    (tmp_path / "ref").mkdir()
    reference = run_module("kdist.train", FOLDER_JOB, cwd=tmp_path / "ref", env=env)
    assert reference.returncode == 0, reference.stderr[-2000:]
    work = tmp_path / "work"
    work.mkdir()
    run_dir = work / "run"
    rng = random.Random(SEED)
    kills = sorted(rng.sample(range(3, 34), 3))  # three kills at distinct random steps
    plan = ["kill", "refused", "kill", "in use", "corrupt", "kill"]
    corrupted: set[str] = set()  # the checkpoint this test broke (re-saved later)
    for number, case in enumerate(plan):
        before = {k: v for k, v in _completed(run_dir).items() if k not in corrupted}
        where = f"round {number} ({case})"
        if case == "kill":
            step = kills.pop(0)
            killer = f"callbacks.extra=[{{_target_: helpers.KillAtStep, step: {step}}}]"
            result = run_module("kdist.train", [*FOLDER_JOB, killer], cwd=work, env=env)
            assert result.returncode in (-9, 0), f"{where}: {result.stderr[-2000:]}"
            after = _completed(run_dir)
            # Rotation may remove the oldest, and a resume that fell back past a corrupt
            # backup saves a step again; nothing completed is cut short or left unreadable.
            for name, data in before.items():
                if name in after and name.endswith(".index") and after[name] != data:
                    _readable(run_dir / name.removesuffix(".index"), where)
            for name in after:
                if name.endswith(".index") and name not in corrupted:
                    _readable(run_dir / name.removesuffix(".index"), where)
            newest = max((int(n.split("-")[1].split(".")[0]) for n in after), default=0)
            assert newest >= min(step, 36) - 10, f"{where}: newest {newest}, killed at {step}"
        elif case in ("refused", "in use"):
            snapshot = _folder_bytes(run_dir)
            other = [*FOLDER_JOB, "data.source.split_seed=7"] if case == "refused" else FOLDER_JOB
            if case == "in use":
                with run_lock.hold(run_dir):  # compared while held: .lock names this test
                    snapshot = _folder_bytes(run_dir)
                    result = run_module("kdist.train", other, cwd=work, env=env)
                    changed = _folder_bytes(run_dir) != snapshot
            else:
                result = run_module("kdist.train", other, cwd=work, env=env)
                changed = _folder_bytes(run_dir) != snapshot
            assert result.returncode == 2, f"{where}: {result.stderr[-2000:]}"
            assert not changed, f"{where}: the folder changed"
        else:  # corrupt the newest backup: the resume falls back past it
            newest = max(
                (run_dir / "backup").glob("ckpt-*.index"),
                key=lambda p: int(p.stem.split("-")[1]),
            )
            data_file = newest.with_suffix(".data-00000-of-00001")
            for folder in ("backup", "checkpoints"):  # a hard-linked twin breaks with it
                twin = run_dir / folder / data_file.name
                if twin.exists() and twin.stat().st_ino == data_file.stat().st_ino:
                    corrupted.update(
                        f"{folder}/{p.name}" for p in twin.parent.glob(f"{newest.stem}.*")
                    )
            raw = bytearray(data_file.read_bytes())
            raw[len(raw) // 2 : len(raw) // 2 + 64] = bytes(64)
            data_file.write_bytes(bytes(raw))
    resumed = run_module("kdist.train", FOLDER_JOB, cwd=work, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run_dir / "metrics.json").read_text())["steps"] == 36
    worst = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(_weights(run_dir), _weights(tmp_path / "ref" / "run"), strict=True)
    )
    assert worst < 1e-6, f"weights differ by {worst}"
    assert not list(run_dir.rglob("*_temp*"))
