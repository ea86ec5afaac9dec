"""Keep `kdist.launch`'s tasks local and make them die with the launcher.

TensorFlow's gRPC servers bind every interface and have no authentication. On Linux the
launcher runs its tasks in a private network namespace: it holds only a loopback
interface, so the tasks talk to each other on 127.0.0.1 and nothing outside this machine
(nor outside the namespace) can connect to their ports. The namespace is made by a small
guardian process (`python -m kdist.launcher.sandbox`), which also cleans up after the launcher:
when the launcher's end of its stdin closes (the launcher exited, however it died, even
by SIGKILL), it kills the tasks' process groups and removes their scratch folders.

Every task also gets the parent-death signal (`prctl(PR_SET_PDEATHSIG, SIGKILL)`), so it
dies with the launcher even if the guardian is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kdist.process.exit_codes import EXIT_FAILED

__all__ = ["Guardian", "die_with_parent", "isolation_support", "start_in_own_group"]

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_PR_SET_PDEATHSIG = 1
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _bring_up_loopback() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14s", b"lo", 0, b"\0" * 14)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | _IFF_UP, b"\0" * 14))


def _enter_private_network() -> bool:
    """Move this process into a new network namespace with loopback up.

    Returns:
        Whether a user namespace was needed too (not running as root).
    """
    if _LIBC is None:
        raise OSError(errno.ENOSYS, "network namespaces need Linux")
    if os.geteuid() == 0:
        _check(_LIBC.unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        _bring_up_loopback()
        return False
    uid, gid = os.geteuid(), os.getegid()
    _check(_LIBC.unshare(_CLONE_NEWUSER | _CLONE_NEWNET), "unshare(CLONE_NEWUSER|CLONE_NEWNET)")
    # Keep the same ids inside, so files the tasks write belong to the user.
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    _bring_up_loopback()
    return True


def die_with_parent(parent: int) -> None:
    """In a child before `exec`: get SIGKILL when the parent dies (Linux; else nothing)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(EXIT_FAILED)


def isolation_support() -> str | None:
    """Why tasks cannot get a private network here, or `None` when they can.

    Checked by making a throw-away namespace in a child process.
    """
    if _LIBC is None:
        return "network namespaces need Linux"
    probe = subprocess.run(
        [sys.executable, "-m", "kdist.launcher.sandbox", "--probe"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode == 0:
        return None
    lines = (probe.stderr or probe.stdout).strip().splitlines()
    return lines[-1] if lines else f"probe exited with status {probe.returncode}"


def start_in_own_group(command: Sequence[str], **popen_args: Any) -> subprocess.Popen:
    """Start `command` in its own process group, its stdout read line by line as text.

    A signal to the group then reaches anything the child started too.

    Args:
        command: the program and its arguments.
        **popen_args: further `subprocess.Popen` arguments (`stdin`, `stderr`, `env`, ...).

    Returns:
        The started process.
    """
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, bufsize=1, start_new_session=True, **popen_args
    )


class Guardian:
    """The guardian process of one launch: a private network (optional) and cleanup.

    The launcher starts it before its tasks, tells it each task's process group and
    scratch-folder prefixes (`watch`), and tells it when it has stopped and cleaned up
    after them itself (`clear`). If the launcher dies in between, the guardian sees its
    stdin close and does that cleanup.

    Args:
        isolate: make a private network namespace for the tasks.

    Raises:
        OSError: when `isolate` is set and the namespace cannot be made.
    """

    def __init__(self, *, isolate: bool):
        self.isolate = isolate
        command = [sys.executable, "-m", "kdist.launcher.sandbox"]
        if isolate:
            command.append("--net")
        self._process = start_in_own_group(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self._process.stdout is not None
        ready = self._process.stdout.readline().strip()
        if ready != "ready":
            self._process.wait(timeout=30)
            error = (self._process.stderr.read() if self._process.stderr else "").strip()
            self._close_streams()
            raise OSError(errno.EPERM, error.splitlines()[-1] if error else "no namespace")
        self._fds: list[tuple[int, int]] = []
        if isolate:
            pid = self._process.pid
            user = Path(f"/proc/{pid}/ns/user")
            if os.stat(user).st_ino != os.stat("/proc/self/ns/user").st_ino:
                self._fds.append((os.open(user, os.O_RDONLY), _CLONE_NEWUSER))
            self._fds.append((os.open(f"/proc/{pid}/ns/net", os.O_RDONLY), _CLONE_NEWNET))

    @property
    def pid(self) -> int:
        return self._process.pid

    def preexec(self) -> Callable[[], None]:
        """The `preexec_fn` of a task: join the namespace, die with the launcher."""
        parent = os.getpid()
        fds = list(self._fds)
        libc = _LIBC

        def _child() -> None:
            # Before `close_fds` runs, so the namespace files are still open here.
            for fd, kind in fds:
                if libc is None or libc.setns(fd, kind) != 0:
                    os._exit(126)
            die_with_parent(parent)

        return _child

    def watch(self, pid: int, scratch: Sequence[str]) -> None:
        """Tell the guardian about a task's process group and its scratch-folder prefixes."""
        self._send(" ".join([str(pid), *scratch]))

    def clear(self) -> None:
        """The tasks told about so far are stopped and cleaned up: forget them."""
        self._send("clear")

    def _send(self, line: str) -> None:
        if self._process.stdin is None or self._process.poll() is not None:
            return
        with contextlib.suppress(BrokenPipeError, OSError):
            self._process.stdin.write(line + "\n")
            self._process.stdin.flush()

    def close(self) -> None:
        """End the guardian (it kills what is left of the tasks and removes scratch)."""
        for fd, _ in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        self._close_streams()

    def _close_streams(self) -> None:
        for stream in (self._process.stdin, self._process.stdout, self._process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _guard() -> None:
    """Wait for the launcher to close stdin, then kill the tasks and remove scratch."""
    groups: list[int] = []
    prefixes: list[str] = []
    for line in sys.stdin:
        fields = line.split()
        if fields == ["clear"]:
            groups, prefixes = [], []
        elif fields:
            groups.append(int(fields[0]))
            prefixes.extend(fields[1:])
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    import shutil

    for prefix in prefixes:
        path = Path(prefix)
        for found in path.parent.glob(f"{path.name}*"):
            shutil.rmtree(found, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m kdist.launcher.sandbox` (started by `kdist.launch`)."""
    parser = argparse.ArgumentParser(prog="python -m kdist.launcher.sandbox")
    parser.add_argument("--net", action="store_true", help="make a private network namespace")
    parser.add_argument("--probe", action="store_true", help="check that one can be made")
    args = parser.parse_args(argv)
    # The launcher's Ctrl-C reaches its whole terminal group: cleaning up is this
    # process's job after the launcher is gone, so it must not die first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.net or args.probe:
        try:
            _enter_private_network()
        except OSError as error:
            print(f"cannot make a private network namespace: {error}", file=sys.stderr)
            raise SystemExit(EXIT_FAILED) from None
    if args.probe:
        return
    print("ready", flush=True)
    _guard()


if __name__ == "__main__":
    main()
