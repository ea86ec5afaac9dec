"""Keras's own tests as the judge: run them as Keras ships them, then routed through kdist.

Gets the installed Keras's source distribution (`pip download --no-binary :all:`) into a
cache outside the repository (`$KDIST_KERAS_SDIST`, default `~/.cache/kdist/keras-sdist`),
unpacks `FILES`, runs them with pytest in a subprocess as Keras ships them (the baseline)
and with `fit`/`evaluate`/`predict` routed through kdist's notebook API
(`route_plugin.py`), then writes the counts per file and per cause.

    .venv/bin/python tests/keras_suite/suite.py --write   # benchmarks/results/keras-suite.*

A test counts when it passes on Keras and calls a routed method; exclusions live in
`exclusions.py`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from exclusions import cause_of, excluded  # noqa: E402

FILES = [
    "callbacks/backup_and_restore_test.py",
    "callbacks/callback_test.py",
    "callbacks/csv_logger_test.py",
    "callbacks/early_stopping_test.py",
    "callbacks/lambda_callback_test.py",
    "callbacks/learning_rate_scheduler_test.py",
    "callbacks/model_checkpoint_test.py",
    "callbacks/monitor_callback_test.py",
    "callbacks/reduce_lr_on_plateau_test.py",
    "callbacks/swap_ema_weights_test.py",
    "callbacks/terminate_on_nan_test.py",
    "models/functional_test.py",
    "models/model_test.py",
    "models/sequential_test.py",
    "trainers/trainer_test.py",
]

# Keras's own pytest settings (its pyproject.toml), which the sdist's tests expect.
PYTEST_INI = """[pytest]
filterwarnings =
    error
    ignore::DeprecationWarning
    ignore::ImportWarning
    ignore::RuntimeWarning
    ignore::PendingDeprecationWarning
    ignore::FutureWarning
    ignore::UserWarning
    ignore:Custom mask layers require a config
"""

RESULTS = REPO / "benchmarks" / "results"


class Unavailable(RuntimeError):
    """The source distribution cannot be had (no network, no pip)."""


def keras_version() -> str:
    import keras

    return str(keras.__version__)


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "kdist" / "keras-sdist"
    return Path(os.environ.get("KDIST_KERAS_SDIST", default))


def sdist(version: str) -> Path:
    """The `keras-<version>.tar.gz` in the cache, downloaded with pip when missing."""
    cache = cache_dir()
    archive = cache / f"keras-{version}.tar.gz"
    if archive.exists():
        return archive
    cache.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    command += [f"keras=={version}", "-d", str(cache)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise Unavailable(f"pip download keras=={version}: {error}") from error
    if done.returncode != 0 or not archive.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise Unavailable(f"pip download keras=={version} failed: {tail[0]}")
    return archive


def unpack(archive: Path, version: str, files: list[str]) -> Path:
    """Keras's test files `files` under `<cache>/tests-<version>/`, with Keras's pytest.ini."""
    work = archive.parent / f"tests-{version}"
    prefix = f"keras-{version}/keras/src/"
    with tarfile.open(archive) as tar:
        for name in files:
            member = tar.getmember(prefix + name)
            source = tar.extractfile(member)
            assert source is not None
            text = source.read().decode()
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_without_missing_imports(text))
    (work / "pytest.ini").write_text(PYTEST_INI)
    return work


def _without_missing_imports(text: str) -> str:
    """trainer_test.py imports jax at the top for its jax cases; jax is not installed."""
    try:
        import jax  # noqa: F401
    except ImportError:
        text = re.sub(
            r"^import jax$", "jax = None  # kdist's harness: jax is not installed", text, flags=re.M
        )
    return text


def run(
    work: Path,
    files: list[str],
    *,
    route: str,
    out: Path,
    overrides: str = "",
    scope: str = "",
    timeout: int = 3000,
) -> dict[str, Any]:
    """Run `files` in a pytest subprocess; per test: outcome, message, routed calls.

    `scope="mirrored"` runs each test inside one `MirroredStrategy` scope (2 CPUs)."""
    env = dict(os.environ)
    env.update(
        KERAS_BACKEND="tensorflow",
        CUDA_VISIBLE_DEVICES="",
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        KDIST_KERAS_SUITE_ROUTE=route,
        KDIST_KERAS_SUITE_OUT=str(out),
        KDIST_KERAS_SUITE_OVERRIDES=overrides,
        KDIST_KERAS_SUITE_SCOPE=scope,
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "route_plugin",
        "--import-mode=importlib",
        "-q",
        "-o",
        "addopts=",
        *files,
    ]
    out.unlink(missing_ok=True)
    process = subprocess.Popen(
        command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        log, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate(timeout=60)
        raise
    (out.with_suffix(".log")).write_text(log)
    if not out.exists():
        raise RuntimeError(f"pytest wrote no results; its output ends: {log[-2000:]}")
    return json.loads(out.read_text())


def compare(baseline: dict[str, Any], routed: dict[str, Any]) -> dict[str, Any]:
    """Counts per file and per cause of the tests that pass on Keras and call a routed method."""
    per_file: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    causes: collections.Counter[str] = collections.Counter()
    reasons: dict[str, str] = {}
    failures: dict[str, str] = {}
    passes: list[str] = []
    for nodeid, record in sorted(baseline.items()):
        if record.get("outcome") != "passed":
            continue
        file = nodeid.split("::", 1)[0]
        counts = per_file[file]
        counts["pass on keras"] += 1
        if not record.get("calls"):
            continue
        counts["calls fit/evaluate/predict"] += 1
        result = routed.get(nodeid, {})
        message = result.get("message", "")
        if result.get("outcome") == "passed":
            counts["routed pass"] += 1
            passes.append(nodeid)
        elif reason := excluded(nodeid, message):
            counts["excluded"] += 1
            reasons[reason] = reasons.get(reason, "")
        else:
            counts["routed fail"] += 1
            causes[cause_of(message)] += 1
            failures[nodeid] = message or result.get("outcome", "not run")
    total: collections.Counter[str] = collections.Counter()
    for counts in per_file.values():
        total.update(counts)
    return {
        "files": {file: dict(counts) for file, counts in sorted(per_file.items())},
        "total": dict(total),
        "causes": dict(causes.most_common()),
        "exclusions": sorted(reasons),
        "failures": failures,
        "passes": passes,
    }


def notes(baseline: dict[str, Any], route: str) -> list[str]:
    """The report's notes: Keras's own run, counted from its results."""
    outcomes = collections.Counter(r.get("outcome", "not run") for r in baseline.values())
    counted = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
    mirrored = route == "mirrored"
    where = " inside one MirroredStrategy scope (2 logical CPUs)" if mirrored else ""
    fails = "the jax and torch cases (not installed)" + (
        " and what Keras's own fit cannot run under that scope" if mirrored else ""
    )
    return [
        f"- Keras's own run{where}: {counted} (its failures: {fails}); only the tests "
        "that pass on Keras are counted.",
        "- A model made outside any strategy scope trains as it is on one device (the "
        "user's own object, as `fit`); one made in the scope of a single-host "
        "strategy trains under that strategy, as `fit` does; any other is "
        "rebuilt in kdist's scope from its config (`kdist.engine.building.rebuild_in_scope`).",
    ]


COLUMNS = ["pass on keras", "calls fit/evaluate/predict", "routed pass", "routed fail", "excluded"]


def markdown(report: dict[str, Any], before: dict[str, Any] | None) -> str:
    """The report as Markdown: one row per file (before -> after where `before` is given)."""

    def cell(file: str, column: str) -> str:
        now = report["comparison"]["files"].get(file, {}).get(column, 0)
        if before is None:
            return str(now)
        then = before["comparison"]["files"].get(file, {}).get(column, 0)
        return str(now) if then == now else f"{then} -> {now}"

    lines = [
        f"# Keras's own tests through kdist (Keras {report['keras']}, strategy {report['route']})",
        "",
        report["how"],
        "",
        "| file | " + " | ".join(COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 1) + "|",
    ]
    files = sorted(
        set(report["comparison"]["files"])
        | set((before or {}).get("comparison", {}).get("files", {}))
    )
    for file in [*files, "total"]:
        if file == "total":
            row = [
                str(report["comparison"]["total"].get(c, 0))
                if before is None
                else _arrow(
                    before["comparison"]["total"].get(c, 0), report["comparison"]["total"].get(c, 0)
                )
                for c in COLUMNS
            ]
            lines.append("| **total** | " + " | ".join(row) + " |")
        else:
            lines.append(f"| {file} | " + " | ".join(cell(file, c) for c in COLUMNS) + " |")
    lines += [
        "",
        "Routed failures by cause (read from each failure's message, `exclusions.CAUSES`):",
        "",
    ]
    for cause, count in report["comparison"]["causes"].items():
        was = (before or {}).get("comparison", {}).get("causes", {}).get(cause, 0)
        lines.append(f"- {cause}: {count}" + (f" (before: {was})" if before else ""))
    if before:
        for cause, count in before["comparison"]["causes"].items():
            if cause not in report["comparison"]["causes"]:
                lines.append(f"- {cause}: 0 (before: {count})")
    lines += ["", "Excluded (`tests/keras_suite/exclusions.py`):", ""]
    lines += [f"- {reason}" for reason in report["comparison"]["exclusions"]] or ["- none"]
    lines += ["", "Notes:", "", *report.get("notes", [])]
    lines += ["", "## What remains: each routed failure, by cause", ""]
    by_cause: dict[str, list[str]] = collections.defaultdict(list)
    for nodeid, message in report["comparison"]["failures"].items():
        by_cause[cause_of(message)].append(f"- `{nodeid}`: {message[:200]}")
    for cause, items in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
        lines += [f"### {cause} ({len(items)})", "", *items, ""]
    lines += ["Each failure's message in full (500 characters): the `.json` beside this file.", ""]
    return "\n".join(lines)


def _arrow(then: int, now: int) -> str:
    return str(now) if then == now else f"{then} -> {now}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", nargs="*", default=FILES)
    parser.add_argument("--route", default="one_device")
    parser.add_argument("--overrides", default="")
    parser.add_argument("--write", default="", help="results name, e.g. keras-suite")
    parser.add_argument("--before", default="", help="a results .json to compare with")
    parser.add_argument(
        "--reuse-baseline",
        action="store_true",
        help="read Keras's own results of an earlier run (they do not depend on kdist)",
    )
    parser.add_argument(
        "--reuse-routed", action="store_true", help="read the routed results of an earlier run"
    )
    parser.add_argument("--note", action="append", default=[], help="a line for the notes")
    args = parser.parse_args(argv)
    version = keras_version()
    work = unpack(sdist(version), version, args.files)
    # Under mirrored both runs are inside one MirroredStrategy scope (Keras's own run
    # under mirrored is the baseline).
    scope = "mirrored" if args.route == "mirrored" else ""
    kept = work / ("baseline-mirrored.json" if scope else "baseline.json")
    if args.reuse_baseline and kept.exists():
        baseline = json.loads(kept.read_text())
    else:
        baseline = run(work, args.files, route="", out=kept, scope=scope)
    routed_out = work / f"routed-{args.route}.json"
    if args.reuse_routed and routed_out.exists():
        routed = json.loads(routed_out.read_text())
    else:
        routed = run(
            work,
            args.files,
            route=args.route,
            out=routed_out,
            overrides=args.overrides,
            scope=scope,
        )

    report = {
        "keras": version,
        "route": args.route,
        "overrides": args.overrides,
        "how": (
            "Each file run twice with pytest in a subprocess (tests/keras_suite/suite.py): "
            "as Keras ships it, and with `fit`, `evaluate` and `predict` routed through "
            "kdist's notebook API (one `kdist.Experiment` per call, "
            f"`strategy={args.route}`, every argument the test passed handed on, "
            "tests/keras_suite/route_plugin.py). Counted: the tests that pass on Keras; "
            "of them, those that call a routed method."
            + (
                " Under mirrored both runs run each test inside one `MirroredStrategy` "
                "scope over 2 logical CPUs: Keras's own run there is the baseline."
                if scope
                else ""
            )
        ),
        "notes": notes(baseline, args.route) + [f"- {note}" for note in args.note],
        "comparison": compare(baseline, routed),
    }
    before = json.loads(Path(args.before).read_text()) if args.before else None
    if before is not None:
        report["before"] = before["comparison"]
    text = markdown(report, before)
    print(text)
    if args.write:
        RESULTS.joinpath(f"{args.write}.json").write_text(json.dumps(report, indent=1) + "\n")
        RESULTS.joinpath(f"{args.write}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
