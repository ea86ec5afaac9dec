"""`docs/troubleshooting.md`: kdist's exit statuses and first refusals, from kdist itself.

The page is generated so that it cannot drift from what kdist prints: the exit statuses
come from `kdist.process.exit_codes`, and each refusal's message and status come from
running it through `kdist.train.precheck`, the check `kdist train` makes of its command
line before Hydra starts (in a scratch folder, as a user's command would). A test compares
the committed page with this generator's (`python -m kdist.docs --check`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kdist.pages.cluster_troubles import cluster_sections
from kdist.process import exit_codes

__all__ = ["EXIT_ADVICE", "REFUSALS", "Refusal", "refusal_output", "troubleshooting_page"]


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """A mistake a new user makes, and why kdist refuses it.

    Args:
        title: the section's heading.
        args: the arguments of `kdist train`.
        cause: why kdist refuses it.
        fix: what to change.
        files: files to create in the scratch folder first (path -> text). Defaults to none.
    """

    title: str
    args: tuple[str, ...]
    cause: str
    fix: str
    files: tuple[tuple[str, str], ...] = ()


# What to do after each exit status (`kdist.process.exit_codes.EXIT_CODES` says what it means).
EXIT_ADVICE: dict[int, str] = {
    exit_codes.EXIT_OK: "Nothing: the run finished; its folder is printed at the end.",
    exit_codes.EXIT_FAILED: (
        "A traceback: a bug in kdist or in your own code (a model, a callback). Report it "
        "with the doctor's output (below) if the traceback ends in kdist."
    ),
    exit_codes.EXIT_CONFIG_ERROR: (
        "Read the one line on stderr: it names the key, the file or the folder, and what "
        "would be valid (the refusals below)."
    ),
    exit_codes.EXIT_NON_FINITE: (
        "Lower `optimizer.learning_rate`, check the data for NaN, or try "
        "`runtime.mixed_precision=null`; the last good backup is kept."
    ),
    exit_codes.EXIT_CHECKPOINT: (
        "The run folder's `checkpoints/` has files but none reads: restore them, or start "
        "in a new folder (`hydra.run.dir=...`)."
    ),
    exit_codes.EXIT_PS_UNAVAILABLE: (
        "Start the parameter servers first, or check `TF_CONFIG`'s `ps` addresses "
        "(`kdist doctor` prints the cluster it sees)."
    ),
    exit_codes.EXIT_WRITE_FAILED: (
        "Free disk space or make the run folder writable, then run the same command again: "
        "it resumes from the last backup."
    ),
    exit_codes.EXIT_RESTART: (
        "Nothing by hand: a cluster manager or `kdist launch --max-restarts` restarts the "
        "job, which resumes from the backup saved on SIGTERM."
    ),
    exit_codes.EXIT_INTERRUPTED: "Run the same command again to resume from the backup.",
}

# The refusals a new user meets first, in the order of a first afternoon with kdist.
REFUSALS: tuple[Refusal, ...] = (
    Refusal(
        title="A key spelled wrong",
        args=("trainer.epoch=3",),
        cause="Every key is checked against its group's typed schema, before TensorFlow starts.",
        fix="Use the key it suggests (`trainer.epochs=3`); the configuration reference lists "
        "every key.",
    ),
    Refusal(
        title="An option that does not exist",
        args=("model=resnet50",),
        cause="A group's options are the YAML files of `kdist/conf/<group>/`.",
        fix="Pick one of the options listed (`kdist train --help` lists them all), or your "
        "own model with `model=custom model._target_=...`.",
    ),
    Refusal(
        title="A value of the wrong type",
        args=("trainer.epochs=three",),
        cause="The schema types each key; Hydra parses the value and cannot make it an integer.",
        fix="Write the value as the type says (`trainer.epochs=3`).",
    ),
    Refusal(
        title="A count that must be positive",
        args=("trainer.epochs=0",),
        cause="After the types, kdist checks ranges, so that no run starts that would do nothing.",
        fix="Give a positive number.",
    ),
    Refusal(
        title="A value outside its choices",
        args=("runtime.mixed_precision=float16",),
        cause="Some keys take one of a few values (Keras's dtype policies here).",
        fix="Use one of the values listed (`runtime.mixed_precision=mixed_float16`).",
    ),
    Refusal(
        title="A typed schema picked as an option",
        args=("strategy=base_mirrored",),
        cause="`base_*` entries are the schemas behind the options, not options: a run on one "
        "would train with whatever its fields default to.",
        fix="Pick the option it suggests (`strategy=mirrored`).",
    ),
    Refusal(
        title="A data source without its file",
        args=("data=csv",),
        cause="The `csv`, `npz`, `tfrecord` and `image_dir` sources read your files; their "
        "path has no default (`???`).",
        fix="Set the path (`data=csv data.source.path=train.csv`); `data=digits`, the "
        "default, needs no file.",
    ),
    Refusal(
        title="Your own model, not named",
        args=("model=custom",),
        cause="`model=custom` trains any callable that returns a Keras model, once you name it.",
        fix="Set `model._target_` to the dotted path of that function or class.",
    ),
    Refusal(
        title="Your own model, not importable",
        args=("model=custom", "model._target_=my_models.build"),
        cause="The `_target_` is imported before the run: here `my_models` is not on the "
        "Python path of the command.",
        fix="Run from the folder that holds `my_models.py` (or install it), and give the "
        "full dotted path.",
    ),
    Refusal(
        title="A run folder that holds other files",
        args=("hydra.run.dir=my_run",),
        files=(("my_run/notes.txt", "my notes\n"),),
        cause="A run writes many files into its folder; mixed with yours, they could not be "
        "told apart (and a resume would read them).",
        fix="Choose a new or empty folder, or pass `trainer.allow_foreign_files=true` if "
        "mixing them is what you want.",
    ),
)


@contextlib.contextmanager
def _scratch(files: tuple[tuple[str, str], ...]) -> Iterator[Path]:
    """A temporary working folder holding `files`; the process's folder is restored."""
    before = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="kdist-refusal-") as folder:
        for name, text in files:
            (Path(folder) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(folder) / name).write_text(text)
        os.chdir(folder)
        try:
            yield Path(folder)
        finally:
            os.chdir(before)


@contextlib.contextmanager
def _as_a_fresh_process() -> Iterator[None]:
    """Log records reach stderr as they do in a fresh `kdist train`, whose root logger has
    no handler yet when the command line is checked (Python's last-resort handler prints
    a warning or an error as its bare message), whatever this process configured (pytest
    captures logs, for one)."""
    root = logging.getLogger()
    saved = root.handlers[:]
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    root.handlers = [handler]
    try:
        yield
    finally:
        root.handlers = saved


def refusal_output(refusal: Refusal) -> tuple[int, str]:
    """Run `kdist train <refusal.args>`'s command-line check, as the command does.

    Args:
        refusal: the case.

    Returns:
        The exit status and what was printed on stderr.

    Raises:
        AssertionError: kdist accepted the command (the page would be wrong).
    """
    from kdist.command import prepare_command
    from kdist.config.schema import register
    from kdist.train import precheck

    register()
    prepare_command()
    stderr = io.StringIO()
    with _scratch(refusal.files), contextlib.redirect_stderr(stderr), _as_a_fresh_process():
        try:
            precheck(list(refusal.args))
        except SystemExit as exit:
            return int(exit.code or 0), stderr.getvalue().strip()
    raise AssertionError(f"kdist train {' '.join(refusal.args)} was accepted")


def _exit_table() -> list[str]:
    names = {
        value: name
        for name, value in vars(exit_codes).items()
        if name.startswith("EXIT_") and isinstance(value, int)
    }
    lines = ["| status | name | meaning | what to do |", "|---|---|---|---|"]
    for status, meaning in sorted(exit_codes.EXIT_CODES.items()):
        lines.append(f"| {status} | `{names[status]}` | {meaning} | {EXIT_ADVICE[status]} |")
    return lines


def troubleshooting_page() -> str:
    """The Markdown text of `docs/troubleshooting.md`."""
    lines = [
        "<!-- Generated by `python -m kdist.docs` from kdist/process/exit_codes.py and the "
        "refusals in kdist/pages/troubleshooting.py and kdist/pages/cluster_troubles.py; "
        "edit those, then run `make docs`. -->",
        "# Troubleshooting",
        "",
        "What kdist's exit statuses mean, the refusals a new user meets first (each message "
        "below is what kdist prints, produced by running the command when this page was "
        "generated), what clusters and machines do when something is wrong (a hang, a port "
        "in use, `TF_CONFIG`, memory, a full disk, a worker that died), and how to report "
        "a bug.",
        "",
        "## Exit statuses",
        "",
        "Every kdist command exits with one of these (`kdist.process.exit_codes`); "
        "`kdist launch --max-restarts` and cluster managers read them.",
        "",
        *_exit_table(),
        "",
        "## The first refusals",
        "",
        "Bad input stops a run before TensorFlow trains anything, with one line on stderr "
        f"that names the key and what to change, and exit status "
        f"{exit_codes.EXIT_CONFIG_ERROR}.",
        "",
    ]
    for refusal in REFUSALS:
        status, stderr = refusal_output(refusal)
        setup = "".join(f"`{name}` exists; " for name, _ in refusal.files)
        lines += [
            f"### {refusal.title}",
            "",
            "```console",
            f"$ kdist train {' '.join(refusal.args)}",
            stderr,
            "```",
            "",
            f"Exit status {status}{' (' + setup.rstrip('; ') + ')' if setup else ''}. "
            f"**Cause:** {refusal.cause} **Fix:** {refusal.fix}",
            "",
        ]
    lines += cluster_sections()
    lines += [
        "## Reporting a bug",
        "",
        "A traceback (exit status 1) that ends in kdist, a hang, or numbers that differ from "
        "Keras's `model.fit` on one device are bugs. Attach to the report:",
        "",
        "1. the output of `kdist doctor` (`kdist doctor > doctor.txt 2>&1`): the versions of "
        "Python and of kdist's dependencies against those kdist requires, the known-bad "
        "combinations it found, the devices TensorFlow sees, a two-step run under each "
        "strategy, and the cluster environment (`TF_CONFIG`, SLURM, Kubernetes). "
        "`kdist doctor --no-probes --json` is the quick version;",
        "2. the command line, and the run folder's `train.log` and `.hydra/config.yaml`;",
        "3. the traceback, whole.",
        "",
        "`kdist --version` prints the versions of kdist, TensorFlow, Keras and Python in one line.",
    ]
    return "\n".join(lines).rstrip() + "\n"
