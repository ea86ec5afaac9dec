"""`kdist`: one command for every entry point; `kdist X ...` is `python -m kdist.X ...`.

Each subcommand hands its arguments, unchanged, to the `main()` of its module, so
`kdist train model=cnn` and `python -m kdist.train model=cnn` are the same run. Only this
dispatcher is new; it imports nothing of TensorFlow (`kdist --version` reads the installed
versions from the package metadata).

Hydra's shell completion (`eval "$(kdist -sc install=bash)"`) asks the installed script
`kdist -sc query=bash` with the line typed so far in `COMP_LINE`: the dispatcher completes
the subcommand's name, and hands the rest of the line to the Hydra app of `kdist train` or
`kdist tune` (schema entries such as `base_mirrored` left out).

Example:

```bash
kdist --help
kdist train model=cnn strategy=mirrored runtime.logical_devices=2
kdist tune tuner=bayesian tuner.max_trials=8
kdist launch --workers 2 -- strategy=multi_worker_mirrored
```
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import io
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata

from kdist.process.exit_codes import EXIT_CONFIG_ERROR, EXIT_OK
from kdist.process.interrupt import exit_on_ctrl_c

__all__ = [
    "COMMANDS",
    "Command",
    "config_path_as_dir",
    "help_from_docstring",
    "main",
    "prepare_command",
    "program",
    "usage",
    "version_text",
]

PROG = "kdist"


@dataclass(frozen=True)
class Command:
    """One subcommand of `kdist`.

    Args:
        module: the module whose `main()` runs it (`python -m <module>` is the same).
        summary: one line for `kdist --help`.
        hydra: whether it is a Hydra app (it completes overrides in the shell).
            Defaults to `False`.
    """

    module: str
    summary: str
    hydra: bool = False


COMMANDS: dict[str, Command] = {
    "train": Command(
        "kdist.train", "train one job, or a multirun of jobs (Hydra overrides)", hydra=True
    ),
    "tune": Command(
        "kdist.tune", "search hyperparameters with keras-tuner; each trial a train job", hydra=True
    ),
    "launch": Command(
        "kdist.launch", "run a job as a local multi-worker or parameter-server cluster"
    ),
    "evaluate": Command("kdist.evaluate", "evaluate a finished run again (run_dir=...)"),
    "predict": Command("kdist.predict", "write a run's predictions.npz (run_dir=...)"),
    "doctor": Command(
        "kdist.doctor.checkup", "check this install: versions, devices, each strategy"
    ),
    "docs": Command(
        "kdist.docs", "regenerate the reference pages of a kdist checkout's docs/ (contributors)"
    ),
    "server": Command(
        "kdist.server", "serve one worker or ps task of a parameter-server cluster (TF_CONFIG)"
    ),
}

_SHELL_COMPLETION = ("-sc", "--shell-completion")
# `kdist help <command>`: that command's `--help`; `kdist help`: the overview.
HELP = "help"


def prepare_command() -> None:
    """What every entry point sets up in its process, and `import kdist` does not.

    Old module paths that saved configs name import (`kdist.compat.moved`), and the help
    templates of `conf/train.yaml` and `conf/tune.yaml` find their resolver, and
    `--config-path` reads as `-cd` (`config_path_as_dir`). The entry
    points set the log level themselves, from their arguments
    (`kdist.process.runtime.quiet_tensorflow`).
    """
    from kdist.compat import moved
    from kdist.config.groups import register_help_resolver

    moved.install()
    register_help_resolver()
    sys.argv[1:] = config_path_as_dir(sys.argv[1:])


_CONFIG_PATH = ("--config-path", "-cp")


def config_path_as_dir(argv: Sequence[str]) -> list[str]:
    """`--config-path X` (`-cp X`) as `--config-dir X`: the user's folder beside kdist's.

    Hydra's `--config-path` replaces the app's own config folder, so a user's config
    with `defaults: [train]` cannot find `train` there, while `-cd` adds the folder to
    the search path and it composes. kdist reads both as `-cd`: a relative folder is
    relative to the current one, as with `-cd` (Hydra's is relative to the app's module).
    A path with a scheme (`pkg://`, `file://`) is left to Hydra.

    Args:
        argv: the command-line arguments (without the program name).

    Returns:
        The arguments, with each `--config-path` as `--config-dir`.
    """
    out: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        name, inline, value = arg.partition("=")
        if name not in _CONFIG_PATH or (not inline and not rest):
            out.append(arg)
            continue
        if not inline:
            value = rest.pop(0)
        out += [name, value] if "://" in value else ["--config-dir", value]
    return out


def program(module: str) -> str:
    """The command's name for usage lines: `kdist launch` when run as that, else
    `python -m kdist.launch` (the `kdist` command puts its name in `sys.argv[0]`).

    Args:
        module: the entry point's module, e.g. `kdist.launch`.

    Returns:
        The name to show.
    """
    first = sys.argv[0] if sys.argv else ""
    return first if first.startswith(f"{PROG} ") else f"python -m {module}"


def help_from_docstring(doc: str | None, module: str) -> str:
    """The `--help` of a command without argparse: its module docstring, for a terminal.

    Args:
        doc: the module's docstring (written for people: what it does, its arguments,
            examples).
        module: the module, e.g. `kdist.evaluate`; its `python -m` form in the text becomes
            the name the command was run by (`program`).

    Returns:
        The text, without the Markdown code fences.
    """
    lines = [line for line in (doc or "").strip().splitlines() if not line.startswith("```")]
    return "\n".join(lines).replace(f"python -m {module}", program(module))


def version_text() -> str:
    """kdist's version with TensorFlow's and Keras's, read from the installed metadata.

    Returns:
        One line, e.g. `kdist 0.9.0 (TensorFlow 2.21.0, Keras 3.15.1, Python 3.11.9)`.
    """
    from kdist import __version__

    def installed(package: str) -> str:
        # The import package's own distribution first; else whichever provides it
        # (TensorFlow comes as tensorflow-cpu, tensorflow-macos, tf-nightly, ...).
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
        for name in metadata.packages_distributions().get(package, []):
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return "not installed"

    python = ".".join(str(part) for part in sys.version_info[:3])
    return (
        f"kdist {__version__} (TensorFlow {installed('tensorflow')}, "
        f"Keras {installed('keras')}, Python {python})"
    )


def usage() -> str:
    """The text of `kdist --help`: one line per subcommand."""
    width = max(len(name) for name in COMMANDS)
    lines = [
        f"usage: {PROG} <command> [arguments]",
        "",
        "Train Keras 3 models under any tf.distribute strategy by changing one word of config.",
        "`kdist <command> ...` is `python -m kdist.<command> ...`, with the same arguments.",
        "",
        "commands:",
        *(f"  {name.ljust(width)}  {command.summary}" for name, command in COMMANDS.items()),
        "",
        "options:",
        "  -h, --help     show this message",
        "  -V, --version  show kdist's, TensorFlow's and Keras's versions",
        "",
        f"`{PROG} help <command>` (or `{PROG} <command> --help`) shows a command's own help. "
        "Examples:",
        f"  {PROG} train model=cnn strategy=mirrored runtime.logical_devices=2 trainer.epochs=3",
        f"  {PROG} train -m optimizer.learning_rate=1e-3,3e-3",
        f"  {PROG} launch --workers 2 -- strategy=multi_worker_mirrored",
        f'Shell completion (bash): eval "$({PROG} -sc install=bash)"',
    ]
    return "\n".join(lines)


def _unknown(name: str) -> str:
    close = difflib.get_close_matches(name, list(COMMANDS), n=1)
    guess = f" (did you mean '{close[0]}'?)" if close else ""
    return f"{PROG}: unknown command '{name}'{guess}; commands: {', '.join(COMMANDS)}"


def _run(name: str, args: Sequence[str]) -> None:
    """Run subcommand `name` as `python -m <its module> args...` would."""
    command = COMMANDS[name]
    # Hydra and argparse read sys.argv; Hydra names the app by argv[0] in its completion
    # script, which must register the installed `kdist` (bash completes by the first word).
    completion_script = any(arg in _SHELL_COMPLETION for arg in args) and not _completion_query(
        args
    )
    sys.argv = [PROG if completion_script else f"{PROG} {name}", *args]
    # Ctrl-C while the subcommand's modules import: one line and 130, no traceback.
    with exit_on_ctrl_c(f"{PROG} {name}: interrupted (Ctrl-C) before it started"):
        prepare_command()
        module = importlib.import_module(command.module)
        module.main()


def _completion_query(args: Sequence[str]) -> bool:
    return any(arg.startswith("query=") for arg in args)


def _complete(args: Sequence[str]) -> None:
    """Answer the shell's `kdist -sc query=bash`: the words that may come next.

    `COMP_LINE` holds the line typed so far (`kdist train strategy=mi`). Before a
    subcommand is complete, the subcommands; after `train` or `tune`, that app's answer.
    """
    line = os.environ.get("COMP_LINE", "")
    words = line.split()
    if len(words) < 2 or (len(words) == 2 and not line.endswith(" ")):
        prefix = words[1] if len(words) == 2 else ""
        print(" ".join(name for name in (*COMMANDS, HELP) if name.startswith(prefix)))
        return
    if words[1] == HELP:
        print(" ".join(COMMANDS) if len(words) < 4 else "")
        return
    command = COMMANDS.get(words[1])
    if command is None:
        print("")  # the shell falls back to file names
        return
    typing = "" if line.endswith(" ") else words[-1]
    if not command.hydra and "--" in (words if line.endswith(" ") else words[:-1])[2:]:
        # `kdist launch --workers 2 -- strategy=mi`: after `--`, the training overrides.
        os.environ["COMP_LINE"] = f"{PROG} train {line.split(' -- ', 1)[1]}"
        _query("train", args)
        return
    if not command.hydra:
        # `kdist launch --wo`: the flags its `--help` lists; else the shell's file names.
        flags = _flags(words[1]) if typing.startswith("-") else []
        print(" ".join(flag for flag in flags if flag.startswith(typing)))
        return
    _query(words[1], args)


def _flags(name: str) -> list[str]:
    """The `--flags` that `kdist <name> --help` lists, in order, for completion."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
        _run(name, ["--help"])
    found = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text.getvalue())
    return list(dict.fromkeys(found))


def _query(name: str, args: Sequence[str]) -> None:
    """Hydra's completion for `kdist <name> ...`, without schema entries (`base_mirrored`).

    Hydra drops the first word of `COMP_LINE` (the program) and reads the rest as
    overrides, so the subcommand's name is dropped too.
    """
    line = os.environ.get("COMP_LINE", "")
    words = line.split()
    if len(words) >= 2 and words[1] == name:
        os.environ["COMP_LINE"] = f"{PROG}{line.split(name, 1)[1]}"
    answer = io.StringIO()
    with contextlib.redirect_stdout(answer), contextlib.suppress(SystemExit):
        _run(name, list(args))
    kept = [word for word in answer.getvalue().split() if not _is_schema_choice(word)]
    print(" ".join(kept))


def _is_schema_choice(word: str) -> bool:
    from kdist.config.groups import is_schema_option

    _, sep, option = word.partition("=")
    return bool(sep) and is_schema_option(option)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `kdist` command (and of `python -m kdist`).

    Args:
        argv: the arguments after `kdist`. Defaults to `None`: `sys.argv[1:]`.

    Raises:
        SystemExit: 0 after `--help` or `--version`; 2 (`EXIT_CONFIG_ERROR`) for a
            missing or unknown subcommand, with one line naming the valid ones; a
            subcommand's own status otherwise.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(usage(), file=sys.stderr)
        raise SystemExit(EXIT_CONFIG_ERROR)
    first, rest = args[0], args[1:]
    if first in ("-h", "--help") or (first == HELP and not rest):
        print(usage())
        raise SystemExit(EXIT_OK)
    if first == HELP:
        # `kdist help train` is `kdist train --help`.
        if rest[0] not in COMMANDS:
            print(_unknown(rest[0]), file=sys.stderr)
            raise SystemExit(EXIT_CONFIG_ERROR)
        first, rest = rest[0], ["--help"]
    if first in ("-V", "--version"):
        print(version_text())
        raise SystemExit(EXIT_OK)
    if first in _SHELL_COMPLETION:
        if _completion_query(rest):
            _complete(args)
            return
        # The completion script is the same for every Hydra app: train's prints it.
        _run("train", args)
        return
    if first not in COMMANDS:
        print(_unknown(first), file=sys.stderr)
        raise SystemExit(EXIT_CONFIG_ERROR)
    if COMMANDS[first].hydra and _completion_query(rest):
        _query(first, rest)
        return
    _run(first, rest)


if __name__ == "__main__":
    main()
