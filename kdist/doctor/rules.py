"""The doctor's `compatibility` rows: known-bad combinations of packages and settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from kdist.doctor.table import Check
from kdist.doctor.versions import TF_DISTRIBUTIONS

__all__ = ["RULES", "Rule", "check_rules"]


def _version(text: str | None) -> Version | None:
    if text is None:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


@dataclass(frozen=True)
class Rule:
    """A known-bad combination: `find(facts)` returns what is wrong here, or `None`."""

    name: str
    status: str
    find: Callable[[Mapping[str, Any]], str | None]


def _minor(text: str | None) -> tuple[int, int] | None:
    version = _version(text)
    return (version.major, version.minor) if version else None


def _installed_before(
    package: str, first: str, problem: str
) -> Callable[[Mapping[str, Any]], str | None]:
    """A rule's `find`: `package` is installed in a version before `first`.

    The message is the package, its version and `problem`.
    """
    floor = Version(first)

    def find(facts: Mapping[str, Any]) -> str | None:
        version = _version(facts["versions"].get(package))
        if version is None or version >= floor:
            return None
        return f"{package} {version} {problem}"

    return find


def _several_tensorflows(facts: Mapping[str, Any]) -> str | None:
    found = [d for d in TF_DISTRIBUTIONS if facts["versions"].get(d)]
    if len(found) < 2:
        return None
    return (
        f"{', '.join(found)} are all installed and overwrite each other's files; "
        "uninstall all but `tensorflow`"
    )


def _other_backend(facts: Mapping[str, Any]) -> str | None:
    backend = facts.get("backend")
    if backend in (None, "tensorflow"):
        return None
    return (
        f"Keras runs on the {backend} backend; kdist trains with TensorFlow: set "
        "KERAS_BACKEND=tensorflow (or the backend in ~/.keras/keras.json)"
    )


def _legacy_keras(facts: Mapping[str, Any]) -> str | None:
    if facts["env"].get("TF_USE_LEGACY_KERAS", "").lower() not in ("1", "true"):
        return None
    return (
        "TF_USE_LEGACY_KERAS is set: `tf.keras` means tf_keras (Keras 2) here while kdist "
        "builds with Keras 3 (`import keras`); do not mix their objects"
    )


def _tensorboard_mismatch(facts: Mapping[str, Any]) -> str | None:
    versions = facts["versions"]
    board, flow = _minor(versions.get("tensorboard")), _minor(versions.get("tensorflow"))
    if board is None or flow is None or board == flow:
        return None
    return (
        f"tensorboard {versions['tensorboard']} with tensorflow {versions['tensorflow']}: "
        "install the same minor version"
    )


def _unseen_gpu(facts: Mapping[str, Any]) -> str | None:
    if not facts.get("nvidia_smi") or facts.get("gpus") != 0:
        return None
    build = (
        ""
        if facts.get("built_with_cuda")
        else " (this TensorFlow is built without CUDA: pip install 'tensorflow[and-cuda]')"
    )
    return (
        f"nvidia-smi is installed but TensorFlow sees no GPU{build}; check "
        "CUDA_VISIBLE_DEVICES and the driver"
    )


RULES: tuple[Rule, ...] = (
    Rule("several TensorFlow packages", "FAIL", _several_tensorflows),
    Rule(
        "Keras 2",
        "FAIL",
        # 3.dev0: the first Keras 3 release, pre-releases included.
        _installed_before(
            "keras", "3.dev0", "is Keras 2; kdist needs Keras 3: pip install 'keras>=3.15,<3.16'"
        ),
    ),
    Rule("Keras backend not TensorFlow", "FAIL", _other_backend),
    Rule(
        "keras-tuner before 1.4",
        "FAIL",
        _installed_before(
            "keras-tuner", "1.4", "predates Keras 3: pip install 'keras-tuner>=1.4.7,<1.5'"
        ),
    ),
    Rule("TF_USE_LEGACY_KERAS", "warn", _legacy_keras),
    Rule("TensorBoard/TensorFlow mismatch", "warn", _tensorboard_mismatch),
    Rule("GPU not seen by TensorFlow", "warn", _unseen_gpu),
)


def check_rules(facts: Mapping[str, Any], rules: Sequence[Rule] = RULES) -> list[Check]:
    """A row per known-bad combination found, or one `ok` row when there is none.

    Args:
        facts: `versions` (distribution -> version or None), `env` (the environment),
            `nvidia_smi` (whether nvidia-smi is on the PATH), and from the TensorFlow
            probe when it ran: `backend`, `gpus`, `built_with_cuda`.
        rules: the rules. Defaults to `RULES`.
    """
    rows = []
    for rule in rules:
        problem = rule.find(facts)
        if problem:
            rows.append(Check("compatibility", rule.name, rule.status, problem))
    if not rows:
        rows.append(
            Check(
                "compatibility",
                "known-bad combinations",
                "ok",
                f"none of the {len(rules)} known found",
            )
        )
    return rows
