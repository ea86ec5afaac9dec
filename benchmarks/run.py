"""`python -m benchmarks`: run the comparisons and write results JSON and markdown.

Example:

```bash
python -m benchmarks                 # everything (about 20 minutes on 2 cores)
python -m benchmarks --quick         # the in-process suites, short rounds (under a minute)
python -m benchmarks --only engine,startup --rounds 9
```

A full run starts each suite in a process of its own (`--in-process` runs them all in
this one, as the quick mode does): a suite measured after others in one process carried
their state (traced functions, thread pools, a grown heap) into its rounds, and the input
rows came out 0.1-0.2 above the same comparisons run alone.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["SUITES", "main", "render", "run"]

REPO = Path(__file__).resolve().parents[1]
# Suite name -> module; each module has `run(ctx) -> list[Comparison]`.
SUITES = {
    "engine": "benchmarks.engine",
    "overhead": "benchmarks.overhead",
    "input": "benchmarks.input_pipeline",
    "cluster": "benchmarks.cluster",
    "startup": "benchmarks.startup",
    "defaults": "benchmarks.defaults",
    "threads": "benchmarks.threads",
    "launchers": "benchmarks.launchers",
    # Not in a default run: only when named in --only.
    "cluster_loops": "benchmarks.cluster_loops",
    "scaling": "benchmarks.scaling",
}
# Suites that start other processes: minutes, not seconds; not in quick mode.
SUBPROCESS_SUITES = ("cluster", "startup", "threads", "launchers", "cluster_loops", "scaling")
# Suites that run only when `--only` names them (spot checks).
ON_REQUEST = ("cluster_loops", "scaling")
# The longest a suite's own process may run (the full `cluster` suite takes about 8 min).
SUITE_TIMEOUT_S = 3600.0


def _setup_process() -> None:
    """Quiet TensorFlow and split the CPU into 2 logical devices before it initialises."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Subprocesses (kdist.train, kdist.launch tasks) import `benchmarks.probes`.
    path = os.environ.get("PYTHONPATH", "")
    if str(REPO) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), path) if p)
    from kdist.process.runtime import quiet_tensorflow

    quiet_tensorflow(2)
    import tensorflow as tf

    from benchmarks.jobs import LOGICAL_DEVICES

    (cpu,) = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * LOGICAL_DEVICES
    )


def run(
    *,
    quick: bool,
    out: Path,
    only: Sequence[str] | None = None,
    rounds: int | None = None,
    workdir: Path | None = None,
    verbose: bool = True,
    isolate: bool | None = None,
) -> dict[str, Any]:
    """Run the suites and write `results.json`, `results.md` and `machine.json` into `out`.

    Args:
        quick: short rounds, and the subprocess suites only when named in `only`.
        out: the results folder (created).
        only: suite names to run. Defaults to `None`: all (quick: the in-process ones).
        rounds: timed rounds per comparison. Defaults to `None`: each comparison's own
            (at least 7; 2 in quick mode).
        workdir: scratch folder. Defaults to `None`: a temporary one, removed at the end.
        verbose: progress on stderr. Defaults to `True`.
        isolate: run each suite in a new process of its own. Defaults to `None`: in a
            full run, not in quick mode.

    Returns:
        The results JSON content.
    """
    _setup_process()
    from benchmarks.context import Context
    from benchmarks.harness import load_average, machine, settle
    from benchmarks.notes import FINDINGS, NOTES
    from benchmarks.report import markdown

    unknown = [name for name in only or () if name not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite(s) {unknown}; choose from {', '.join(SUITES)}")
    if isolate is None:
        isolate = not quick
    scratch = workdir or Path(tempfile.mkdtemp(prefix="kdist-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    ctx = Context(quick=quick, rounds=rounds, workdir=scratch, verbose=verbose)
    results: dict[str, Any] = {
        "kdist_benchmarks": 1,
        "mode": "quick" if quick else "full",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": machine(),
        "suites": {},
        "comparisons": [],
        "not_measured": [],
    }
    started = time.perf_counter()
    settle()
    try:
        for name, module_name in SUITES.items():
            if only and name not in only:
                results["suites"][name] = "not selected"
                continue
            if not only and name in ON_REQUEST:
                results["suites"][name] = "on request: run it with --only"
                continue
            if quick and not only and name in SUBPROCESS_SUITES:
                results["suites"][name] = "skipped in quick mode (starts processes)"
                continue
            suite_started = time.perf_counter()
            ctx.log(f"suite {name}" + (" (its own process)" if isolate else ""))
            if isolate:
                _merge(results, _suite_process(name, ctx, scratch / f"suite-{name}"))
            else:
                for item in importlib.import_module(module_name).run(ctx):
                    if isinstance(item, dict):  # not measured, with the reason
                        results["not_measured"].append(item)
                    else:
                        results["comparisons"].append(item.to_json())
            results["suites"][name] = "done"
            results.setdefault("suite_seconds", {})[name] = round(
                time.perf_counter() - suite_started, 1
            )
    finally:
        if workdir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    results["load_average_end"] = load_average()
    targets = [c for c in results["comparisons"] if c["met"] is not None]
    results["summary"] = {
        "targets": len(targets),
        "met": sum(1 for c in targets if c["met"]),
        "missed": [c["id"] for c in targets if not c["met"]],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    machine_info = {**results["machine"], "load_average_end": results["load_average_end"]}
    (out / "machine.json").write_text(json.dumps(machine_info, indent=2) + "\n")
    (out / "results.md").write_text(markdown(results, NOTES, FINDINGS))
    ctx.log(
        f"wrote {out / 'results.json'} and results.md: {results['summary']['met']} of "
        f"{len(targets)} targets met in {results['seconds']:.0f} s"
    )
    return results


def _suite_process(name: str, ctx: Any, folder: Path) -> dict[str, Any]:
    """Run one suite in a new `python -m benchmarks --in-process` and return its results.

    Its progress lines go to this process's stderr. It runs in a session of its own, so a
    timeout kills it and every process it started.

    Raises:
        RuntimeError: the suite's process failed or ran over `SUITE_TIMEOUT_S`.
    """
    command = [sys.executable, "-m", "benchmarks", "--in-process", "--only", name]
    command += ["--out", str(folder / "out"), "--workdir", str(folder / "work")]
    if ctx.quick:
        command.append("--quick")
    if ctx.rounds is not None:
        command += ["--rounds", str(ctx.rounds)]
    if not ctx.verbose:
        command.append("--quiet")
    child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        code = child.wait(timeout=SUITE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        raise RuntimeError(
            f"benchmark suite {name!r} ran over {SUITE_TIMEOUT_S:.0f} s in its own process "
            f"(pid {child.pid}) and was killed"
        ) from None
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=60)
    if code != 0:
        raise RuntimeError(
            f"benchmark suite {name!r} failed in its own process (exit code {code}); "
            f"run it alone to see why: python -m benchmarks --only {name} --in-process"
        )
    result: dict[str, Any] = json.loads((folder / "out" / "results.json").read_text())
    return result


def _merge(results: dict[str, Any], suite: dict[str, Any]) -> None:
    """Add one suite process's rows and reasons to the run's results."""
    results["comparisons"] += suite["comparisons"]
    results["not_measured"] += suite["not_measured"]


def render(results_json: Path) -> Path:
    """Rewrite the markdown beside `results_json` (`results.md` for `results.json`).

    Returns:
        The markdown file's path.
    """
    from benchmarks.notes import FINDINGS, NOTES
    from benchmarks.report import markdown

    results = json.loads(results_json.read_text())
    path = results_json.with_suffix(".md")
    path.write_text(markdown(results, NOTES, FINDINGS))
    return path


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m benchmarks`."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="short rounds, in-process suites")
    parser.add_argument("--only", default=None, help=f"comma-separated suites: {', '.join(SUITES)}")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per comparison")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results folder (default: benchmarks/results, or outputs/benchmarks-quick)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="keep scratch files here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument(
        "--in-process",
        dest="isolate",
        action="store_false",
        default=None,
        help="run every suite in this process (a full run starts one process per suite)",
    )
    parser.add_argument(
        "--isolate",
        dest="isolate",
        action="store_true",
        help="start one process per suite in quick mode too",
    )
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        help="only rewrite the markdown beside this results JSON (e.g. after editing notes.py)",
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        render(args.render)
        return
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds ({args.rounds}) must be a positive integer")
    only = [s.strip() for s in args.only.split(",") if s.strip()] if args.only else None
    for name in only or ():
        if name not in SUITES:
            parser.error(f"unknown suite {name!r}; choose from {', '.join(SUITES)}")
    out = args.out or (
        REPO / "outputs" / "benchmarks-quick" if args.quick else REPO / "benchmarks" / "results"
    )
    results = run(
        quick=args.quick,
        out=out,
        only=only,
        rounds=args.rounds,
        workdir=args.workdir,
        verbose=not args.quiet,
        isolate=args.isolate,
    )
    missed = results["summary"]["missed"]
    print(
        f"{results['summary']['met']} of {results['summary']['targets']} targets met"
        + (f"; missed: {', '.join(missed)}" if missed else "")
        + f"; results in {out}",
        flush=True,
    )
