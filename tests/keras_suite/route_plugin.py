"""A pytest plugin for Keras's own test files: records each test and, routed, trains with kdist.

Loaded by `suite.py` in a pytest subprocess (`-p route_plugin`) that runs Keras's
`*_test.py` files. It registers Keras's markers and `skip_if_backend` (Keras's repository
`conftest.py`, which its source distribution does not ship), records per test its outcome,
its failure's message (its first lines) and which of `fit`/`evaluate`/`predict` it
called, and writes them to `$KDIST_KERAS_SUITE_OUT` (JSON).

With `KDIST_KERAS_SUITE_SCOPE=mirrored` each test runs inside one `MirroredStrategy`
scope over 2 logical CPUs (Keras's own run under mirrored, and the routed one: kdist
trains a model made in that scope under that strategy, as `fit` does).

With `KDIST_KERAS_SUITE_ROUTE=one_device` (or `mirrored`) it routes Keras's
`fit`, `evaluate` and `predict` through kdist's notebook API as a new user would: one
`kdist.Experiment` per call, the strategy named, every argument the test passed handed on,
kdist's `History` (or result) returned. `KDIST_KERAS_SUITE_OVERRIDES` adds config overrides
(comma separated, e.g. `callbacks=minimal`).
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import tempfile
import threading
from typing import Any

import pytest

ROUTE = os.environ.get("KDIST_KERAS_SUITE_ROUTE", "")
# `mirrored`: each test runs inside one `MirroredStrategy` scope (2 logical CPUs), for
# Keras's own run under mirrored and for the routed one alike.
SCOPE = os.environ.get("KDIST_KERAS_SUITE_SCOPE", "")
OUT = os.environ.get("KDIST_KERAS_SUITE_OUT", "")
OVERRIDES = [o for o in os.environ.get("KDIST_KERAS_SUITE_OVERRIDES", "").split(",") if o]
METHODS = ("fit", "evaluate", "predict")

_state = threading.local()
_records: dict[str, dict[str, Any]] = {}
_calls: set[str] = set()
_run_root = tempfile.mkdtemp(prefix="kdist-keras-suite-")


def skip_if_backend(given_backend: str, reason: str) -> Any:
    """Keras's `conftest.skip_if_backend` (its test files import it)."""
    from keras.src.backend import backend

    return pytest.mark.skipif(backend() == given_backend, reason=reason)


def _compose() -> Any:
    import kdist

    run_dir = tempfile.mkdtemp(dir=_run_root)
    overrides = [f"strategy={ROUTE}", f"run_dir={run_dir}", *OVERRIDES]
    if ROUTE == "mirrored":
        overrides.append("runtime.logical_devices=2")
    return kdist.compose(overrides)


def _routed(name: str, original: Any) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_state, "inside", False):
            return original(self, *args, **kwargs)
        _calls.add(name)
        if not ROUTE:
            return original(self, *args, **kwargs)
        import kdist

        given = signature.bind(self, *args, **kwargs).arguments
        given.pop("self")
        given.update(given.pop("kwargs", {}))
        if name == "fit":
            given.setdefault("epochs", 1)  # Keras's default; kdist's is `trainer.epochs`
        if given.get("verbose") == "auto":
            given.pop("verbose")
        _state.inside = True
        try:
            exp = kdist.Experiment(_compose())
            exp.build_model(model=self)
            return getattr(exp, name)(**given)
        finally:
            _state.inside = False

    return call


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires_trainable_backend: Keras's marker")
    import sys

    # Keras's test files do `from conftest import skip_if_backend`.
    sys.modules.setdefault("conftest", sys.modules[__name__])
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    for name in METHODS:
        setattr(TensorFlowTrainer, name, _routed(name, getattr(TensorFlowTrainer, name)))
    if SCOPE == "mirrored":
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(2)]
        )
        _scope["strategy"] = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


_scope: dict[str, Any] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    _calls.clear()
    if "strategy" in _scope:
        # Inside the test method (pytest calls `item.obj` as the method): Keras's
        # `TestCase.setUp` clears the session, which drops a scope entered before it.
        method = item.obj  # type: ignore[attr-defined]

        @functools.wraps(method)
        def in_scope(*args: Any, **kwargs: Any) -> Any:
            with _scope["strategy"].scope():
                return method(*args, **kwargs)

        item.obj = in_scope  # type: ignore[attr-defined]
    yield
    _records.setdefault(item.nodeid, {})["calls"] = sorted(_calls)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    record = _records.setdefault(report.nodeid, {})
    if report.when == "call" or report.outcome != "passed":
        if record.get("outcome") in (None, "passed"):
            record["outcome"] = report.outcome
        if report.failed:
            record["message"] = _message(report)


def _message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return " | ".join(line.strip() for line in text.strip().splitlines()[:4])[:500]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if OUT:
        with open(OUT, "w") as f:
            json.dump(_records, f, indent=1, sort_keys=True)
    _exit["status"] = int(exitstatus)


_exit: dict[str, int] = {}


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the process once pytest has reported: a tf.data iterator left by a test can
    hang the interpreter's exit (as `tests/conftest.py` says)."""
    if "status" in _exit:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit["status"])
