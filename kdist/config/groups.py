"""The config groups: each folder of `kdist/conf/` that a run picks one option from.

The one list of them. Validation, the typed schemas, the generated docs and
`kdist.evaluate` read it from here, and a test checks that `conf/train.yaml` and the
folders of `kdist/conf/` agree with it. No TensorFlow is imported.
"""

from __future__ import annotations

import difflib
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "COMMAND_GROUPS",
    "CONFIG_GROUPS",
    "GROUPS",
    "GROUP_INTROS",
    "HELP_RESOLVER",
    "SCHEMA_PREFIX",
    "TRAIN_GROUPS",
    "ConfigGroup",
    "check_choices",
    "group_options",
    "groups_help",
    "is_schema_option",
    "register_help_resolver",
]


@dataclass(frozen=True)
class ConfigGroup:
    """One config group.

    Args:
        name: the group's folder in `kdist/conf/` and its key in a composed config.
        intro: one paragraph for the docs: what the group chooses.
        in_train: whether every train config has it (`conf/train.yaml`'s defaults).
            Defaults to `True`.
    """

    name: str
    intro: str
    in_train: bool = True


CONFIG_GROUPS = (
    ConfigGroup(
        "strategy",
        "How training is distributed: one device, several local devices "
        "(mirrored), several processes or machines (multi-worker, parameter server).",
    ),
    ConfigGroup(
        "model",
        "The network. Each option's `_target_` is a callable that returns a "
        "`keras.Model`; kdist passes it `input_shape` and `num_classes` from the data.",
    ),
    ConfigGroup(
        "data",
        "Where examples come from (`source`, a `_target_` returning a "
        "`kdist.data.Source`) and how the input pipeline reads them.",
    ),
    ConfigGroup(
        "optimizer",
        "A Keras optimizer (`_partial_`: built later inside the strategy scope), "
        "plus kdist's learning-rate scaling with the replica count.",
    ),
    ConfigGroup(
        "trainer",
        "The loop: epochs, steps, the global batch (split over the replicas), "
        "steps per `tf.function` call, validation, loss and metrics.",
    ),
    ConfigGroup(
        "runtime",
        "The process: seeds, determinism, logical devices, thread pools, memory growth, "
        "mixed precision, XLA and TensorFlow's log level.",
    ),
    ConfigGroup(
        "callbacks",
        "What a run writes and watches: TensorBoard, history.csv, checkpoints, "
        "backups, early stopping, curves.png and extra Keras callbacks.",
    ),
    ConfigGroup(
        "tuner",
        "keras-tuner searches (`python -m kdist.tune`): the oracle, its budget and "
        "the search space (`tuner/space`).",
        in_train=False,
    ),
)

# Every group, in the order of `conf/train.yaml` (then `tuner`, which `conf/tune.yaml` adds).
GROUPS = tuple(group.name for group in CONFIG_GROUPS)
# The groups every train config has.
TRAIN_GROUPS = tuple(group.name for group in CONFIG_GROUPS if group.in_train)
# One paragraph per group for the generated docs.
GROUP_INTROS = {group.name: group.intro for group in CONFIG_GROUPS}
# The groups each Hydra command composes (its help lists these and no others).
COMMAND_GROUPS: dict[str, tuple[str, ...]] = {
    "train": TRAIN_GROUPS,
    "tune": (*TRAIN_GROUPS, "tuner", "tuner/space"),
}

# Typed schemas are stored in Hydra's ConfigStore under this prefix (`base_mirrored`, ...):
# the YAML options extend them; they are not options a command line picks.
SCHEMA_PREFIX = "base_"

# The OmegaConf resolver the help templates of conf/train.yaml and conf/tune.yaml call.
HELP_RESOLVER = "kdist.help_groups"

_CONF = Path(__file__).resolve().parents[1] / "conf"


def is_schema_option(option: str) -> bool:
    """Whether `option` names a typed schema (`base_mirrored`), not a YAML option."""
    return option.startswith(SCHEMA_PREFIX)


def group_options(group: str) -> list[str]:
    """The options of `group` that kdist ships (`kdist/conf/<group>/*.yaml`), sorted.

    Args:
        group: a group's path, e.g. `strategy` or `tuner/space`.

    Returns:
        The option names, without schema entries.
    """
    folder = _CONF / group
    return sorted(path.stem for path in folder.glob("*.yaml") if not is_schema_option(path.stem))


def check_choices(overrides: Sequence[str]) -> None:
    """Refuse a schema entry picked as a group's option (`strategy=base_mirrored`).

    A schema has no values of its own: a run that picked one would train with whatever
    its fields default to. Sweeps (`strategy=one_device,base_mirrored`) are checked too.

    Args:
        overrides: Hydra overrides, e.g. `["strategy=mirrored", "trainer.epochs=3"]`.

    Raises:
        ConfigError: naming the group, the value and the valid options.
    """
    from kdist.config.errors import ConfigError
    from kdist.config.override_checks import check_override_text

    # Before Hydra's grammar reads them: a full-width digit, a 100,000-digit number.
    check_override_text(overrides)
    for override in overrides:
        key, sep, value = override.partition("=")
        group = key.lstrip("+~").removeprefix("override ").strip()
        if not sep or group not in COMMAND_GROUPS["tune"]:
            continue
        values = value.removeprefix("choice(").removesuffix(")").split(",")
        for option in (item.strip() for item in values):
            if is_schema_option(option):
                valid = group_options(group)
                close = difflib.get_close_matches(
                    option.removeprefix(SCHEMA_PREFIX), valid, n=1, cutoff=0.5
                )
                guess = f"did you mean {group}={close[0]}? " if close else ""
                raise ConfigError(
                    group,
                    "is a typed schema, not an option to pick",
                    value=option,
                    hint=f"{guess}options: {', '.join(valid)}",
                )


def groups_help(command: str, choices: Mapping[str, str | None] | None = None) -> str:
    """The config groups of `kdist <command> --help`: options and what each group picks.

    Args:
        command: `train` or `tune`.
        choices: the option each group has now (Hydra's `hydra.runtime.choices`),
            marked with `*`. Defaults to `None`: nothing marked.

    Returns:
        A block of text, one entry per group (options on the first line).
    """
    chosen = dict(choices or {})
    groups = COMMAND_GROUPS.get(command, TRAIN_GROUPS)
    width = max(len(group) for group in groups)
    lines: list[str] = []
    for group in groups:
        options = [
            f"{option}*" if chosen.get(group) == option else option
            for option in group_options(group)
        ]
        lines.append(f"  {group.ljust(width)}  {', '.join(options)}")
        intro = GROUP_INTROS.get(group)
        if intro:
            lines += textwrap.wrap(
                _summary(intro),
                width=96,
                initial_indent=" " * (width + 4),
                subsequent_indent=" " * (width + 4),
            )
    # Hydra fills the template with `string.Template`: a `$` would start a placeholder.
    return "\n".join(lines).replace("$", "$$")


def _summary(intro: str) -> str:
    """The first sentences of a group's intro, at least ~60 characters, as plain text."""
    text = ""
    for sentence in intro.replace("`", "").split(". "):
        text = f"{text} {sentence.rstrip('.')}." if text else f"{sentence.rstrip('.')}."
        if len(text) >= 60:
            break
    return text


def register_help_resolver() -> None:
    """Register `${kdist.help_groups:COMMAND}` with OmegaConf (idempotent).

    conf/train.yaml's `hydra.help.template` calls it; the `--help` of every entry point
    that composes those configs needs it registered first.
    """
    from omegaconf import Container, OmegaConf

    from kdist.config.fast_help import install

    install()  # Hydra lists no group the template does not print (kdist.config.fast_help)

    def resolve(command: str, *, _root_: Container) -> str:
        # The option each group has now (`model=cnn --help` marks cnn), as Hydra records it.
        choices = OmegaConf.select(_root_, "hydra.runtime.choices", default=None)
        found = OmegaConf.to_container(choices) if choices is not None else {}
        items = found.items() if isinstance(found, dict) else ()
        chosen = {str(k): None if v is None else str(v) for k, v in items}
        return groups_help(command, chosen)

    if not OmegaConf.has_resolver(HELP_RESOLVER):
        OmegaConf.register_new_resolver(HELP_RESOLVER, resolve)
