"""A multirun job's output on Hydra's launchers: prefixed, quiet, and said where it is.

`conf/train.yaml` registers `JobOutputCallback` under `hydra.callbacks`. Hydra's basic
launcher runs the jobs one after another in the command's process, where `kdist.train`
drops TensorFlow's start-up lines (`kdist.process.quiet`). Hydra's other launchers run a
job in another process:

- joblib: the jobs' processes share the command's terminal. Each line a job writes (its
  Python output, its logs, TensorFlow's C++ lines) is prefixed with `[job <num>] `, as
  `kdist launch` prefixes its tasks' lines with `[worker <i>] `, and TensorFlow's start-up
  lines are dropped as the basic launcher drops them. A job's process ends when the
  command's process is gone (`end_with_parent`): killed by the system, it leaves no job
  training on.
- submitit: each job writes to its own files. The sweep says where they are when it starts
  (submitit's folder pattern) and, at its end, each job's file; TensorFlow's start-up lines
  are dropped there too.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from kdist.process import quiet
from kdist.runs.fileio import write_text_atomic

__all__ = ["OUTPUT_RECORD", "JobOutputCallback", "LinePrefixer", "end_with_parent"]

# `<sweep>/.jobs/<num>.output`: where a submitit job's output went (read at the sweep's end).
OUTPUT_RECORD = ".output"
_JOBS = ".jobs"
_MAX_LISTED = 10  # more jobs than this: the folder pattern says it
_NO_DRIVER = "Could not find cuda drivers"
_CUINIT = re.compile(r"failed call to cuInit")


def _kind(config: Any) -> str | None:
    """`joblib`, `submitit`, or `None` (the basic launcher, another one, no Hydra node)."""
    hydra_cfg = config.get("hydra") if isinstance(config, (DictConfig, Mapping)) else None
    launcher = (hydra_cfg or {}).get("launcher") or {}
    target = str(launcher.get("_target_") or "")
    if target.endswith("JoblibLauncher"):
        return "joblib"
    if "hydra_submitit_launcher" in target:
        return "submitit"
    return None


class LinePrefixer:
    """Prefix every line written to file descriptors 1 and 2; drop TensorFlow's start-up lines.

    The descriptors, not `sys.stdout`: TensorFlow's C++ code writes to them directly. Each
    is replaced by a pipe that a thread reads, line by line, onto the original descriptor.

    Args:
        prefix: put before each line, e.g. `"[job 0] "`.
        quiet_startup: drop the start-up lines `kdist.process.quiet` drops, when
            `TF_CPP_MIN_LOG_LEVEL` is 1 or more. Defaults to `True`.
    """

    def __init__(self, prefix: str, *, quiet_startup: bool = True):
        self.prefix = prefix.encode()
        self.quiet_startup = quiet_startup
        self._saved: dict[int, int] = {}
        self._readers: list[threading.Thread] = []
        self._seen_no_driver = False

    def start(self) -> None:
        """Route descriptors 1 and 2 through the prefixing threads."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for fd in (1, 2):
            try:
                saved = os.dup(fd)
            except OSError:
                continue  # no such descriptor (an embedding host): left as it is
            read, write = os.pipe()
            os.dup2(write, fd)
            os.close(write)
            self._saved[fd] = saved
            reader = threading.Thread(target=self._pump, args=(read, saved), daemon=True)
            reader.start()
            self._readers.append(reader)

    def stop(self, *, timeout: float = 10.0) -> None:
        """Restore the descriptors; every line written before is out when this returns."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)  # closes the pipe's last writer: its reader ends
        for reader in self._readers:
            reader.join(timeout)
        if not any(reader.is_alive() for reader in self._readers):
            # A reader still running (a child process of the job holds the pipe) keeps
            # its descriptor: closed, its number could be another file's.
            for saved in self._saved.values():
                with contextlib.suppress(OSError):
                    os.close(saved)
        self._saved, self._readers = {}, []

    def _dropped(self, line: str) -> bool:
        if not (self.quiet_startup and quiet.enabled()):
            return False
        self._seen_no_driver = self._seen_no_driver or _NO_DRIVER in line
        if self._seen_no_driver and _CUINIT.search(line):
            return True
        return any(pattern.search(line) for pattern in quiet.stderr_noise())

    def _pump(self, read: int, out: int) -> None:
        pending = b""
        with open(read, "rb", buffering=0) as pipe:
            while True:
                chunk = pipe.read(65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                self._write(out, lines)
        if pending:
            self._write(out, [pending])

    def _write(self, out: int, lines: list[bytes]) -> None:
        kept = [
            self.prefix + line + b"\n"
            for line in lines
            if not self._dropped(line.decode(errors="replace"))
        ]
        if kept:
            with contextlib.suppress(OSError):
                os.write(out, b"".join(kept))


_WATCHING: list[int] = []  # the parent a watchdog of this process watches (at most one)


def end_with_parent(*, poll: float = 1.0, grace: float = 30.0) -> None:
    """End this process once its parent is gone: SIGTERM, then SIGKILL after `grace` s.

    A joblib worker runs its job on while the command that started it is killed (by the
    out-of-memory killer, `kill -9`): its pipes close but the job trains on, an orphan.
    SIGTERM lets kdist save a backup and stop (`kdist.callbacks.guards`).

    Args:
        poll: seconds between looks at the parent. Defaults to `1.0`.
        grace: seconds SIGTERM has before SIGKILL. Defaults to `30.0`.
    """
    parent = os.getppid()
    if _WATCHING:
        return
    _WATCHING.append(parent)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="kdist-end-with-parent", daemon=True).start()


class JobOutputCallback(Callback):
    """A Hydra callback for a job that another process runs (joblib's, submitit's launchers).

    In the job's process: joblib's jobs get their lines prefixed (`LinePrefixer`), submitit's
    record where their output goes. In the sweep's own process, for submitit: a line saying
    where the jobs' output goes when the sweep starts, and each job's file when it ends.
    """

    def __init__(self) -> None:
        self._prefixer: LinePrefixer | None = None
        self._sweep_dir: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if _kind(config) != "submitit":
            return
        sweep = Path(str(config.hydra.sweep.dir))
        folder = str(config.hydra.launcher.get("submitit_folder", "")).replace("%j", "<id>")
        print(
            f"kdist: submitit runs each job in its own process; its output goes to "
            f"{folder or sweep / '.submitit'}/<id>_<task>_log.out (and .err), its train.log "
            f"to {sweep}/<job>/ (each job's file is named when the sweep ends)",
            flush=True,
        )
        self._sweep_dir = sweep
        atexit.register(self._say_outputs)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._say_outputs()

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        kind = _kind(config)
        if kind == "joblib":
            end_with_parent()
            self._prefixer = LinePrefixer(f"[job {config.hydra.job.num}] ")
            self._prefixer.start()
        elif kind == "submitit":
            # Its own files: no prefix, TensorFlow's start-up lines dropped all the same.
            self._prefixer = LinePrefixer("")
            self._prefixer.start()
            _record_output(config)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if self._prefixer is not None:
            self._prefixer.stop()
            self._prefixer = None

    def _say_outputs(self) -> None:
        sweep, self._sweep_dir = self._sweep_dir, None
        if sweep is None:
            return
        records = []
        for path in sorted((sweep / _JOBS).glob(f"*{OUTPUT_RECORD}")):
            with contextlib.suppress(OSError, ValueError):
                records.append(json.loads(path.read_text()))
        records.sort(key=lambda r: int(r.get("job", 0)))
        for record in records[:_MAX_LISTED]:
            print(f"kdist: job {record.get('job')}: output {record.get('stdout')}", flush=True)


def _record_output(config: DictConfig) -> None:
    """Keep where this submitit job's output goes, for the sweep's process to say."""
    try:
        import submitit

        paths = submitit.JobEnvironment().paths
        task = submitit.JobEnvironment().global_rank
        record = {
            "job": int(config.hydra.job.num),
            "stdout": str(paths.stdout).replace("%t", str(task)),
            "stderr": str(paths.stderr).replace("%t", str(task)),
        }
        if task != 0:
            return  # the job's first task speaks for it
        folder = Path(str(config.hydra.sweep.dir)) / _JOBS
        write_text_atomic(folder / f"{record['job']}{OUTPUT_RECORD}", json.dumps(record))
    except Exception:  # the record is a convenience: the folder pattern was said already
        return
