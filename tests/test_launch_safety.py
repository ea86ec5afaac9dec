"""`kdist.launch` keeps local clusters local and leaves nothing behind (issue 13).

Every test starts its own processes, bounds every wait, and checks by pid that nothing it
started is left running.
"""

from __future__ import annotations

import errno
import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, alive, launch_pids, non_loopback_ipv4, read_until, start_launch

import kdist.launch
from kdist.cluster.chief import scratch_prefix
from kdist.config.errors import ConfigError
from kdist.launch import run
from kdist.launcher.checks import check_strategy
from kdist.launcher.sandbox import isolation_support

pytestmark = pytest.mark.multiworker

# A chief that only waits: the workers and parameter servers are real `kdist.server`s.
SLEEPER = "import time\nprint('chief up', flush=True)\ntime.sleep(600)\n"
SERVING = r"\[(\w+ \d)\] .* serving on 127\.0\.0\.1:(\d+)"


@pytest.fixture(autouse=True)
def _importable_tmp(tmp_path: Path, monkeypatch):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=5):
            return True
    except OSError as error:
        assert error.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, None), error
        return False


def _wait_gone(pids, seconds: float = 20) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def _servers(tmp_path: Path, *extra: str):
    """A launch of one worker and one ps `kdist.server` and a sleeping chief; its ports."""
    launcher = start_launch(
        ["--workers", "1", "--ps", "1", "--module", "sleeper", "--run-dir", "r", *extra],
        cwd=tmp_path,
    )
    seen: list[str] = []
    found = read_until(launcher, SERVING, timeout=120, seen=seen, count=2)
    return launcher, seen, {m[1]: int(m[2]) for m in found}


def _kill(launcher: subprocess.Popen, pids) -> None:
    if launcher.poll() is None:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    if launcher.stdout is not None:
        launcher.stdout.close()


@pytest.mark.skipif(isolation_support() is not None, reason="no network namespaces here")
def test_task_ports_are_refused_from_outside_and_sigterm_cleans_up(tmp_path: Path):
    address = non_loopback_ipv4()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    scratch = Path(scratch_prefix(tmp_path / "r", "worker", 0) + "ckpt-test")
    launcher, seen, ports = _servers(tmp_path)
    pids = launch_pids("".join(seen))
    try:
        assert "tasks run in a private network namespace" in "".join(seen)
        assert set(ports) == {"worker 0", "ps 0"}
        scratch.mkdir()
        for port in ports.values():
            assert not _connects(address, port)
            assert not _connects("127.0.0.1", port)  # not even from this machine's loopback
        launcher.send_signal(signal.SIGTERM)
        rest, _ = launcher.communicate(timeout=60)
        assert launcher.returncode == 128 + signal.SIGTERM, rest
        assert not _wait_gone(pids.values())
        assert not scratch.exists()
    finally:
        _kill(launcher, pids.values())


def test_without_isolation_the_ports_are_open_and_a_warning_says_so(tmp_path: Path):
    # The control for the test above: what every local launch did before.
    address = non_loopback_ipv4()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    launcher, seen, ports = _servers(tmp_path, "--no-isolation")
    pids = launch_pids("".join(seen))
    try:
        text = "".join(seen)
        assert text.count("[launch] WARNING: private network turned off") == 1
        assert all(_connects(address, port) for port in ports.values())
    finally:
        _kill(launcher, pids.values())
    assert not _wait_gone(pids.values())


def test_without_namespaces_one_loud_warning(tmp_path: Path, monkeypatch):
    class NoNamespaces(kdist.launch.Guardian):
        def __init__(self, *, isolate: bool):
            if isolate:
                raise OSError(errno.EPERM, "Operation not permitted")
            super().__init__(isolate=False)

    monkeypatch.setattr(kdist.launch, "Guardian", NoNamespaces)
    (tmp_path / "done.py").write_text("print('done', flush=True)\n")
    log = io.StringIO()
    code = run(2, [], module="done", run_dir=tmp_path / "r", timeout=60, output=log)
    text = log.getvalue()
    assert code == 0, text
    warnings = [line for line in text.splitlines() if "WARNING" in line]
    assert warnings == [
        "[launch] WARNING: no private network for the tasks (Operation not permitted): they "
        "listen on every interface; TensorFlow's gRPC servers have no authentication: anyone "
        "who can reach this machine's ports can run code in the tasks"
    ]


def test_kill_9_of_the_launcher_takes_its_tasks_and_scratch_with_it(tmp_path: Path):
    scratch = [
        Path(scratch_prefix(tmp_path / "r", role, 0) + "ckpt-backup") for role in ("worker", "ps")
    ]
    launcher, seen, _ = _servers(tmp_path)
    pids = launch_pids("".join(seen))
    try:
        assert set(pids) == {"worker 0", "ps 0", "chief 0"}
        for path in scratch:
            path.mkdir()
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
        assert not _wait_gone(pids.values())
        deadline = time.monotonic() + 20
        while any(p.exists() for p in scratch) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(p.exists() for p in scratch)
    finally:
        _kill(launcher, pids.values())


@pytest.mark.parametrize(
    ("args", "strategy"),
    [
        (["--workers", "2"], "one_device"),  # the default strategy
        (["--workers", "2", "--", "strategy=mirrored"], "mirrored"),
        (["--workers", "2", "--ps", "1", "--", "strategy=multi_worker_mirrored"], None),
    ],
)
def test_strategies_that_train_copies_are_refused(tmp_path: Path, args, strategy):
    result = subprocess.run(
        [sys.executable, "-m", "kdist.launch", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kdist: config error: strategy="), lines
    if strategy:
        assert f"{strategy} trains an independent copy in each process" in lines[0]
    assert "multi_worker_mirrored, or parameter_server" in lines[0]
    assert not result.stdout  # no task was started


def test_the_right_strategies_and_a_single_worker_pass_the_check():
    check_strategy(["strategy=multi_worker_mirrored"], workers=2, ps=0)
    check_strategy(["strategy=parameter_server"], workers=2, ps=1)
    check_strategy([], workers=1, ps=0)
    with pytest.raises(ConfigError, match="strategy='auto'"):
        check_strategy(["strategy=auto"], workers=3, ps=0)
    with pytest.raises(ConfigError, match="parameter_server needs parameter servers"):
        check_strategy(["strategy=parameter_server"], workers=2, ps=0)
    # A recipe's strategy counts, not only the command line's.
    with pytest.raises(ConfigError, match="mirrored trains an independent copy"):
        check_strategy(["-cd", str(REPO / "recipes"), "-cn", "mnist_cnn_mirrored"], workers=2, ps=0)


def test_the_printed_run_directory_is_hydra_run_dir_after_a_restart(tmp_path: Path):
    (tmp_path / "fails.py").write_text("import sys\nsys.exit(1)\n")
    log = io.StringIO()
    chosen = tmp_path / "elsewhere"
    # A killed worker's scratch folder: the launcher removes it for the folder in use.
    scratch = Path(scratch_prefix(chosen, "worker", 1) + "ckpt-backup")
    scratch.mkdir()
    code = run(
        2,
        [f"hydra.run.dir={chosen}"],
        module="fails",
        max_restarts=1,
        output=log,
        timeout=60,
        grace_seconds=1,
    )
    text = log.getvalue()
    assert code == 1
    assert text.count(f"run directory {chosen}\n") == 2, text
    assert "outputs" not in text
    assert not scratch.exists()


def test_a_port_that_stays_in_use_is_exit_2_and_one_line(tmp_path: Path):
    (tmp_path / "taken.py").write_text(
        "import sys\nprint('bind failed: Address already in use', flush=True)\nsys.exit(1)\n"
    )
    log = io.StringIO()
    code = run(1, [], module="taken", run_dir=tmp_path / "r", output=log, timeout=60)
    assert code == 2
    errors = [line for line in log.getvalue().splitlines() if "error" in line]
    assert errors == ["[launch] error: a port of worker 0 stayed in use after 3 retries"]


def test_a_host_that_is_not_this_machine_is_exit_2(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "kdist.launch", "--workers", "1", "--host", "203.0.113.7"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("kdist: config error: --host='203.0.113.7': cannot listen")
    assert len(result.stderr.strip().splitlines()) == 1


def test_temp_leftovers_of_an_interrupted_save_are_removed_at_start(tmp_path: Path):
    (tmp_path / "done.py").write_text("print('done', flush=True)\n")
    leftover = tmp_path / "r" / "backup" / "ckpt-20_temp"
    leftover.mkdir(parents=True)
    (leftover / "part-0").write_bytes(b"x" * 100)
    kept = tmp_path / "r" / "backup" / "ckpt-15.index"
    kept.write_bytes(b"index")
    log = io.StringIO()
    assert run(1, [], module="done", run_dir=tmp_path / "r", output=log, timeout=60) == 0
    assert not leftover.exists() and kept.exists()
    assert f"removed {leftover}, left by an interrupted save" in log.getvalue()
