"""Issue 43's POOR command-line cases: `--version`, `--config-path`, `server`, `docs`,
SIGINT to `tune`. Cost: ~60 s."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


# --- kdist --version, whatever distribution provides TensorFlow ------------------------------


def _fake_site(root: Path, distributions: dict[str, tuple[str, str]]) -> Path:
    """A site folder holding only the dist-info of `{name: (version, top-level package)}`."""
    for name, (version, top_level) in distributions.items():
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "top_level.txt").write_text(f"{top_level}\n")
    return root


def _version_line(site: Path) -> str:
    # -S: no site-packages, so the shared venv's own tensorflow and keras are not seen.
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "from kdist.command import version_text\nprint(version_text())\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code, str(site), str(REPO)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


@pytest.mark.parametrize(
    "provider",
    ["tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly", "tensorflow-intel"],
)
def test_version_finds_tensorflow_in_any_distribution(tmp_path: Path, provider: str):
    site = _fake_site(tmp_path, {provider: ("2.21.7", "tensorflow"), "keras": ("3.15.9", "keras")})
    line = _version_line(site)
    assert "(TensorFlow 2.21.7, Keras 3.15.9, Python " in line, line


def test_version_says_when_tensorflow_is_missing(tmp_path: Path):
    site = _fake_site(
        tmp_path, {"keras": ("3.15.9", "keras"), "tensorboard": ("2.21.0", "tensorboard")}
    )
    assert "(TensorFlow not installed, Keras 3.15.9, " in _version_line(site)


# --- --config-path works as -cd ---------------------------------------------------------------


def _kdist(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "kdist", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def own_config(tmp_path: Path) -> Path:
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "mine.yaml").write_text(
        "defaults:\n  - train\n  - _self_\ntrainer:\n  epochs: 1\n  steps_per_epoch: 2\n"
    )
    return folder


@pytest.mark.parametrize(
    "how",
    [
        ["--config-path", "{abs}"],
        ["--config-path={abs}"],
        ["-cp", "{abs}"],
        ["--config-path", "configs"],
    ],
)
def test_config_path_composes_as_config_dir(own_config: Path, how: list[str]):
    def job(options: list[str]) -> subprocess.CompletedProcess:
        return _kdist(
            ["train", *options, "--config-name", "mine", "--cfg", "job"], own_config.parent
        )

    by_dir = job(["-cd", str(own_config)])
    assert by_dir.returncode == 0, by_dir.stderr[-2000:]
    by_path = job([part.format(abs=own_config) for part in how])
    assert by_path.returncode == 0, by_path.stderr[-2000:]
    assert by_path.stdout == by_dir.stdout
    assert "epochs: 1\n  steps_per_epoch: 2\n" in by_path.stdout


def test_config_path_trains_as_config_dir(own_config: Path, tmp_path: Path):
    run_dir = tmp_path / "run"
    done = _kdist(
        [
            "train",
            "--config-path",
            str(own_config),
            "--config-name",
            "mine",
            f"hydra.run.dir={run_dir}",
            "callbacks=minimal",
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run_dir / "metrics.json").is_file()


# --- kdist docs writes a checkout's docs/, never ./docs of any folder --------------------------


def test_docs_outside_a_checkout_is_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    from kdist import docs

    installed = tmp_path / "site-packages"  # an installed kdist: no mkdocs.yml beside it
    installed.mkdir()
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    monkeypatch.setattr(docs, "CHECKOUT", installed)
    monkeypatch.chdir(elsewhere)
    with pytest.raises(SystemExit) as stopped:
        docs.main([])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kdist: config error: --out: ") and "\n" not in err, err
    assert "not a checkout" in err and "--out" in err
    assert list(elsewhere.iterdir()) == [] and list(installed.iterdir()) == []


def test_docs_in_a_checkout_writes_its_docs_folder_whatever_the_current_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from kdist import docs

    checkout = tmp_path / "kdist-checkout"
    checkout.mkdir()
    (checkout / "mkdocs.yml").write_text("site_name: kdist\n")
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    monkeypatch.setattr(docs, "CHECKOUT", checkout)
    refreshed: list[str] = []  # executing the notebooks is `make docs`'s, not this test's
    monkeypatch.setattr(
        docs, "refresh_notebooks", lambda folder, force: refreshed.append(folder) or []
    )
    monkeypatch.chdir(elsewhere)
    docs.main([])
    assert list(elsewhere.iterdir()) == []
    assert refreshed == [str(checkout / "docs")]
    assert (checkout / "docs" / "config" / "trainer.md").is_file()
    # An explicit --out is the user's choice.
    docs.main(["--out", str(elsewhere / "pages")])
    assert (elsewhere / "pages" / "config" / "trainer.md").is_file()


# --- Ctrl-C to kdist.tune: status 130 and one line, no traceback -------------------------------


def test_ctrl_c_to_tune_is_one_line_and_status_130(tmp_path: Path):
    import os
    import signal
    import time

    tests = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    search = tmp_path / "search"
    log = search / "tune.log"
    args = [
        "trainer=fast_dev",
        "trainer.verbose=0",
        "callbacks=minimal",
        "tuner.verbose=0",
        "model=custom",
        "model._target_=hypermodels.build_slow",
        "~tuner/space",
        "++model.hp.delay=600",
        "tuner.max_trials=1",
        f"hydra.run.dir={search}",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "kdist.tune", *args],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": path},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        ends = time.monotonic() + 300
        # tune.log is opened by Hydra's job: the search runs (its first build sleeps 600 s).
        while time.monotonic() < ends and process.poll() is None and not log.is_file():
            time.sleep(0.2)
        assert process.poll() is None and log.is_file(), "the search did not start"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    assert process.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == (
        "kdist.tune: interrupted (Ctrl-C); the search stopped: run the same command again "
        "to resume it"
    )


# --- kdist server listens at the address the cluster gives the task ----------------------------


def _answers(host: str, port: int) -> bytes:
    """What a connection to `host:port` reads first: gRPC's HTTP/2 SETTINGS frame, or
    `b""` when the connection is closed (or refused)."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=10) as connection:
            connection.settimeout(30)
            return connection.recv(64)
    except (ConnectionRefusedError, ConnectionResetError):
        return b""


def test_server_at_loopback_is_not_reachable_at_the_other_addresses(tmp_path: Path):
    import json
    import os
    import signal
    import time

    from helpers import free_port

    from kdist.server import _local_addresses

    others = sorted(a for family, a, _ in _local_addresses() if family == 2 and a != "127.0.0.1")
    if not others:
        pytest.skip("this machine has no IPv4 address but loopback")
    cluster = {
        "chief": [f"127.0.0.1:{free_port()}"],
        "worker": [f"127.0.0.1:{free_port()}"],
        "ps": [f"127.0.0.1:{free_port()}"],
    }
    port = int(cluster["ps"][0].rsplit(":", 1)[1])
    config = json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}})
    server = subprocess.Popen(
        [sys.executable, "-m", "kdist.server"],
        env={**os.environ, "TF_CONFIG": config, "TF_CPP_MIN_LOG_LEVEL": "2"},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + 300
        lines = []
        for line in server.stdout:
            lines.append(line)
            if "serving on" in line or time.monotonic() > deadline:
                break
        assert "ps 0 serving on 127.0.0.1:" in "".join(lines), "".join(lines)[-3000:]
        assert _answers("127.0.0.1", port)  # gRPC speaks at the task's address
        for other in others:
            assert _answers(other, port) == b"", other
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.communicate(timeout=30)  # closes the pipe too
