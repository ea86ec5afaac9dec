"""The doctor's run: every check in table order (`run_doctor`) and its command line (`main`)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from kdist.command import program
from kdist.doctor.environment import check_cluster, check_launch_network, device_rows
from kdist.doctor.probes import (
    MULTI_PROCESS,
    check_strategy,
    probe_strategy,
    probe_tensorflow,
    run_probe,
    strategy_options,
)
from kdist.doctor.rules import check_rules
from kdist.doctor.table import Check, render
from kdist.doctor.versions import TF_DISTRIBUTIONS, check_versions, installed
from kdist.process.exit_codes import EXIT_FAILED, EXIT_OK

__all__ = ["main", "run_doctor"]


def run_doctor(
    *,
    strategies: Sequence[str] | None = None,
    probes: bool = True,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Check]:
    """Run every check and return the rows of the table.

    Args:
        strategies: the strategy options to probe. Defaults to `None`: every option in
            `conf/strategy/`.
        probes: start TensorFlow in subprocesses (devices and strategies). Defaults to
            `True`.
        timeout: seconds each probe may take. Defaults to `120.0`.
        env: the environment to report on. Defaults to `None`: `os.environ`.
        progress: called with a short message before each probe. Defaults to `None`.

    Returns:
        The `Check` rows, in table order.

    Raises:
        ValueError: for a strategy that is not an option of `conf/strategy/`.
    """
    env = os.environ if env is None else env
    known = strategy_options()
    chosen = list(known) if strategies is None else list(strategies)
    unknown = [s for s in chosen if s not in known]
    if unknown:
        raise ValueError(f"no strategy option {', '.join(unknown)}; options: {', '.join(known)}")
    say = progress or (lambda message: None)
    rows = check_versions()
    if probes:
        say("starting TensorFlow")
    tf_result = (
        run_probe([sys.executable, "-m", "kdist.doctor", "--probe-tensorflow"], timeout=timeout)
        if probes
        else None
    )
    devices, info = device_rows(tf_result, timeout)
    facts: dict[str, Any] = {
        "versions": {
            name: installed(name)
            for name in {*TF_DISTRIBUTIONS, "keras", "keras-tuner", "tensorboard"}
        },
        "env": dict(env),
        "nvidia_smi": shutil.which("nvidia-smi") is not None,
        **{k: info[k] for k in ("backend", "gpus", "built_with_cuda") if k in info},
    }
    rows += check_rules(facts)
    rows += devices
    if not probes:
        rows += [Check("strategies", n, "skip", "not probed (--no-probes)") for n in chosen]
    elif not info:
        rows += [Check("strategies", n, "skip", "TensorFlow does not start") for n in chosen]
    else:
        say(f"training 2 steps with strategy={', '.join(chosen)}")
        # Two single-process probes at a time (they mostly wait for TensorFlow to start);
        # a multi-process probe runs alone, as its tasks must not starve each other.
        single = [n for n in chosen if n not in MULTI_PROCESS]
        with ThreadPoolExecutor(max_workers=2) as pool:
            found = dict(
                zip(
                    single,
                    pool.map(lambda n: check_strategy(n, timeout=timeout, devices=info), single),
                    strict=True,
                )
            )
        for name in chosen:
            if name not in found:
                found[name] = check_strategy(name, timeout=timeout, devices=info)
        rows += [found[name] for name in chosen]
    rows += check_cluster(env)
    rows.append(check_launch_network())
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m kdist.doctor`."""
    parser = argparse.ArgumentParser(
        prog=program("kdist.doctor"),
        description="Check that this install can train with kdist, and under which strategies.",
    )
    parser.add_argument(
        "--strategies",
        default=None,
        help="comma-separated strategy options to probe (default: every option)",
    )
    parser.add_argument(
        "--no-probes", action="store_true", help="do not start TensorFlow (no devices, no runs)"
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds each probe may take (default 120)"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe-tensorflow", action="store_true", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.probe_tensorflow:
        probe_tensorflow()
        return
    if args.probe:
        probe_strategy(args.probe, [a for a in rest if a != "--"])
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.timeout <= 0:
        parser.error(f"--timeout ({args.timeout}) must be positive")
    strategies = (
        [s.strip() for s in args.strategies.split(",") if s.strip()] if args.strategies else None
    )

    def progress(message: str) -> None:
        # On a terminal only: a log file or a test reads just the table.
        if sys.stderr.isatty():
            print(f"kdist doctor: {message} ...", file=sys.stderr, flush=True)

    try:
        rows = run_doctor(
            strategies=strategies,
            probes=not args.no_probes,
            timeout=args.timeout,
            progress=progress,
        )
    except ValueError as error:
        parser.error(str(error))
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        print(render(rows, color=color))
    raise SystemExit(EXIT_FAILED if any(r.status == "FAIL" for r in rows) else EXIT_OK)
