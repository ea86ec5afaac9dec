"""The files a run's path enters (issue 51): which kdist files run code before the first
training step, imports aside.

Run with `python -m benchmarks.run_path [walk ...]` (`--list` names each file with the
functions entered there; `--why`, the calls that first brought the walk into each file,
innermost first: where to look to take a file off the path). The walks:

- `notebook`: `kdist.Experiment(kdist.compose([]))`, a model of the user's built in its
  scope (`exp.build_model(model=...)`), then `exp.fit(x, y, epochs=1)` on arrays;
- `notebook-fit`: the same, counting from the `fit` call only;
- `cli`: `python -m kdist.train strategy=mirrored trainer.epochs=1`, in this process
  (`kdist.train.main`), from the command's start;
- `resume`: a `local_sgd` backup written by kdist 3407276
  (`tests/checkpoints_3407276/local_sgd`) restored by a `diloco` run (a resume in another
  sync mode): the restore's decision, the calls inside `Controller.restore`;
- `resume-whole`: the same from `Experiment.restore` (the folder's resume check, the run's
  config written, the changes allowed on resume applied).

**How it counts.** Every kdist module is imported first, so that the count leaves imports
aside; then `sys.setprofile` (and `threading.setprofile`) records each Python function
call whose code lies under `kdist/`, until `StandardRunner.train_steps` is entered (the
first training step) or the walk's call returns. The calls of the import hook
(`kdist.compat.moved`'s `find_spec`, asked for each module first imported during the
walk, TensorFlow's lazy ones among them) are imports, and are left out too.

**The deciding files.** When the first step begins, the kdist calls on the stack are the
functions that decided the run's order; their files, in the order the stack enters them,
are the walk's deciding files, and each time the stack comes back to a file it had left
(`train.py` -> Hydra -> `train.py`) is a return.

**Back and forth.** Over the whole walk, not only the first step's stack: a call into a
kdist file that is still on the stack below the calling file (`binding.py` calling
`job.py` while `job.py` waits on `binding.py`) is a call back into a file left; the walk
names each (`caller -> callee`). Calls from Python's or TensorFlow's frames count too
(TensorFlow calling a kdist override back into the module that called TensorFlow).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import pkgutil
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["WALKS", "Walk", "count", "main"]

REPO = Path(__file__).resolve().parent.parent
OLD_BACKUPS = REPO / "tests" / "checkpoints_3407276"
# The import machinery's calls into kdist: imports, not the run's path.
IMPORT_CALLS = {"find_spec", "find_module", "create_module", "exec_module"}


class Walk:
    """The kdist files entered, in the order first entered, each with its functions."""

    def __init__(self, root: Path):
        self.root = str(root)
        self.files: dict[str, list[str]] = collections.OrderedDict()
        self.stopped = False
        self.within: Any = None  # a code object: count only the calls made inside it
        self._stop_at: Any = None
        # The kdist calls on the stack when the first step began, outermost first.
        self.chain: list[tuple[str, str]] = []
        # Calls back into a kdist file still on the stack below another: "caller -> callee".
        self.reentries: list[str] = []
        # Each file's first entry: the kdist calls on the stack below it, outermost first.
        self.entered_from: dict[str, list[str]] = {}

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.stopped or event != "call":
            return
        code = frame.f_code
        if code is self._stop_at:
            self.stopped = True
            self.chain = self._stack(frame)
            return
        if code.co_filename.startswith(self.root) and code.co_name not in IMPORT_CALLS:
            if self.within is not None and not _inside(frame, self.within):
                return
            name = os.path.relpath(code.co_filename, self.root)
            if name not in self.files:
                self.entered_from[name] = [":".join(call) for call in self._stack(frame.f_back)]
            self.files.setdefault(name, []).append(code.co_name)
            self._note_reentry(frame, name)

    def _note_reentry(self, frame: FrameType, name: str) -> None:
        """Record a call into `name` made by another kdist file while `name` is still
        on the stack below it (a call back into a file left: back and forth)."""
        below = self._stack(frame.f_back)
        if not below or below[-1][0] == name:
            return
        if any(file == name for file, _ in below[:-1]):
            caller = ":".join(below[-1])
            self.reentries.append(f"{caller} -> {name}:{frame.f_code.co_name}")

    @contextmanager
    def recording(self) -> Iterator[None]:
        from kdist.engine.standard_runner import StandardRunner

        self._stop_at = StandardRunner.train_steps.__code__
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        try:
            yield
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]

    def _stack(self, frame: FrameType | None) -> list[tuple[str, str]]:
        calls = []
        while frame is not None:
            code = frame.f_code
            if code.co_filename.startswith(self.root) and code.co_name not in IMPORT_CALLS:
                calls.append((os.path.relpath(code.co_filename, self.root), code.co_name))
            frame = frame.f_back
        return calls[::-1]

    def deciding(self) -> list[str]:
        """The files of the calls on the stack when the first step began (the functions
        that decide the order of the run), in the order the stack first enters them."""
        return list(dict.fromkeys(name for name, _ in self.chain))

    def returns(self) -> int:
        """How often that stack comes back to a file it had left (back and forth)."""
        runs = [
            name for i, (name, _) in enumerate(self.chain) if i == 0 or name != self.chain[i - 1][0]
        ]
        return len(runs) - len(set(runs))

    def packages(self) -> dict[str, int]:
        found = collections.Counter(
            name.split(os.sep)[0] if os.sep in name else "(top)" for name in self.files
        )
        return dict(found.most_common())


def _inside(frame: FrameType | None, code: Any) -> bool:
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def import_all() -> Path:
    """Import every kdist module; the package's folder."""
    import kdist

    for module in pkgutil.walk_packages(kdist.__path__, "kdist."):
        importlib.import_module(module.name)
    return Path(kdist.__file__).parent


def _arrays() -> tuple[Any, Any]:
    import numpy as np

    x = np.random.default_rng(0).random((64, 8), dtype="float32")
    return x, (x.sum(axis=1) > 4).astype("int32")


def _notebook(walk: Walk, *, from_fit: bool) -> None:
    import keras

    import kdist

    x, y = _arrays()
    with walk.recording() if not from_fit else _nothing():
        exp = kdist.Experiment(kdist.compose([]))
        with exp.strategy.scope():
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
            model.compile("sgd", "sparse_categorical_crossentropy")
        exp.build_model(model=model)
        with walk.recording() if from_fit else _nothing():
            exp.fit(x, y, epochs=1, verbose=0)


def _cli(walk: Walk) -> None:
    from kdist import train

    argv = sys.argv
    sys.argv = ["kdist.train", "strategy=mirrored", "trainer.epochs=1"]
    try:
        with walk.recording():
            train.main()
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
    finally:
        sys.argv = argv


def _resume(walk: Walk, *, decision_only: bool) -> None:
    import kdist
    from kdist.engine import Controller

    if decision_only:
        walk.within = Controller.restore.__code__

    run_dir = Path.cwd() / "resume"
    shutil.copytree(OLD_BACKUPS / "local_sgd" / "backup", run_dir / "backup")
    overrides = [
        "strategy=mirrored",
        "runtime.logical_devices=2",
        "model.units=[8]",
        "trainer.epochs=2",
        "trainer.steps_per_epoch=6",
        "callbacks.backup.every_n_steps=3",
        "callbacks.checkpoint.enabled=false",
        "strategy.sync.mode=diloco",
        "strategy.sync.sync_every=4",
        "trainer.allow_resume_changes=true",
    ]
    exp = kdist.Experiment(kdist.compose(overrides), run_dir=run_dir)
    exp.build_model()
    with walk.recording():
        step = exp.restore()
    if step != 6:
        raise RuntimeError(f"the resume walk restored step {step}, not the backup's 6")


@contextmanager
def _nothing() -> Iterator[None]:
    yield


WALKS: dict[str, Callable[[Walk], None]] = {
    "notebook": lambda walk: _notebook(walk, from_fit=False),
    "notebook-fit": lambda walk: _notebook(walk, from_fit=True),
    "cli": _cli,
    "resume": lambda walk: _resume(walk, decision_only=True),
    "resume-whole": lambda walk: _resume(walk, decision_only=False),
}


def count(name: str) -> Walk:
    """Walk `name` (one of `WALKS`) in a fresh temporary folder, in this process.

    Each walk wants a process of its own: a second one finds TensorFlow's devices set.
    """
    walk = Walk(import_all())
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix=f"kdist-walk-{name}-") as folder:
        os.chdir(folder)
        try:
            WALKS[name](walk)
        finally:
            os.chdir(cwd)
    return walk


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("walk", choices=sorted(WALKS), help="the walk to count")
    parser.add_argument("--list", action="store_true", help="name each file and its calls")
    parser.add_argument(
        "--why",
        action="store_true",
        help="name, for each file, the kdist call that first entered it and that call's callers",
    )
    parser.add_argument(
        "--json",
        type=Path,
        help='also write {"files": {file: [calls]}, "stepped": bool, "deciding": [file], '
        '"returns": int, "reentries": ["caller -> callee"]} here',
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    walk = count(args.walk)
    print(f"{args.walk}: {len(walk.files)} kdist files {walk.packages()}")
    if walk.chain:
        print(
            f"{args.walk}: the first step's stack: {len(walk.deciding())} deciding files, "
            f"{walk.returns()} return(s) to a file left: "
            + " -> ".join(f"{name}:{function}" for name, function in walk.chain)
        )
    print(f"{args.walk}: {len(walk.reentries)} call(s) back into a file on the stack")
    for call, times in collections.Counter(walk.reentries).most_common():
        print(f"  {call}" + (f" (x{times})" if times > 1 else ""))
    if args.json is not None:
        found = {"files": walk.files, "stepped": walk.stopped, "deciding": walk.deciding()}
        found |= {"returns": walk.returns(), "reentries": walk.reentries}
        args.json.write_text(json.dumps(found, indent=1))
    if args.list:
        for name, calls in walk.files.items():
            print(f"  {name} ({len(calls)}): {', '.join(sorted(set(calls)))}")
    if args.why:
        for name, stack in walk.entered_from.items():
            print(f"  {name} <- " + (" <- ".join(reversed(stack)) or "the walk"))


if __name__ == "__main__":
    main()
