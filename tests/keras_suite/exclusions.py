"""The one table of Keras tests left out of the routed count, each with its reason.

A test named here still runs in both passes; `suite.py` counts it as excluded rather than
as a routed failure. Keys are pytest node ids relative to the unpacked tests
(`<package>/<file>_test.py::<Class>::<test>`), or a prefix ending in `*`.

A second table, `CAUSES`, reads a routed failure's message to name its cause in the
report (the first pattern that matches wins).
"""

from __future__ import annotations

import re

__all__ = ["CAUSES", "EXCLUDED", "cause_of", "excluded"]

# Why each is left out. `message` patterns exclude by the failure's message.
EXCLUDED: dict[str, str] = {}

# A routed test whose failure message matches is excluded, with the reason.
EXCLUDED_MESSAGES: list[tuple[str, str]] = [
    (
        r"is a keras\.Layer with Keras's Trainer, not a keras\.Model",
        "Keras's test-only `Trainer`-on-a-`Layer` models (trainers/trainer_test.py): "
        "not a `keras.Model` (no `save`, `get_config` or `to_json`), which kdist's run "
        "folder needs; kdist refuses them in one line",
    ),
]

CAUSES: list[tuple[str, str]] = [
    (r"data\.source:", "evaluate/predict checked against the config's data"),
    (
        r"could not be deserialized|Error when deserializing|Could not locate function",
        "rebuilt in the strategy's scope from its config: a class or loss Keras cannot "
        "deserialize (not registered, no get_config)",
    ),
    (r"NaN or infinite|NonFiniteLoss|is (nan|inf) after", "non-finite values: kdist's guard"),
    (r"num_batches|__len__", "PyDataset num_batches without __len__"),
    (r"steps_per_epoch|[Gg]enerator", "steps_per_epoch or a generator's end"),
    (r"expected 2, got 0|any trainable weights", "no trainable weights"),
    (r"Python objects|[Rr]agged", "ragged tensors or None in x"),
    (r"F1Score|FBetaScore|only length-1|only 0-d|size-1", "non-scalar metric"),
    (r"Mixing different tf\.distribute\.Strategy", "a model made under another strategy"),
    (r"\bsave\b|get_config|to_json", "saving the model"),
]


def excluded(nodeid: str, message: str) -> str | None:
    """The reason a routed test is excluded, or `None`."""
    for key, reason in EXCLUDED.items():
        if nodeid == key or (key.endswith("*") and nodeid.startswith(key[:-1])):
            return reason
    for pattern, reason in EXCLUDED_MESSAGES:
        if re.search(pattern, message):
            return reason
    return None


def cause_of(message: str) -> str:
    """The cause a routed failure's message names (`CAUSES`), else `other`."""
    for pattern, cause in CAUSES:
        if re.search(pattern, message):
            return cause
    return "other (an assertion or a value differs)"
