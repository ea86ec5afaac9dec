"""Which callables a run folder's config may name when kdist reads it back.

`kdist.evaluate run_dir=X` rebuilds the strategy, data and metrics from
`X/.hydra/config.yaml`. A run folder can come from anyone, and Hydra's `instantiate`
calls whatever importable callable a `_target_` names, so a config read from a folder is
rebuilt only from kdist's and Keras's building blocks unless the user says the folder is
trusted (`trust_run_dir=true`).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from kdist.config.errors import ConfigError

__all__ = ["TRUSTED_PREFIXES", "TRUST_FLAG", "check_trusted_targets"]

TRUST_FLAG = "trust_run_dir"

# Modules whose callables only build training objects. Not `keras.utils` (`get_file`
# downloads and extracts), `keras.models`/`keras.saving` (loaders), `keras.config`.
TRUSTED_PREFIXES = (
    "kdist.strategies.",
    "kdist.models.",
    "kdist.data.",
    "kdist.optimizers.",
    "kdist.schedules.",
    "kdist.callbacks.",
    "kdist.tuning.oracles.",
    "keras.losses.",
    "keras.metrics.",
    "keras.optimizers.",
    "keras.layers.",
    "keras.initializers.",
    "keras.regularizers.",
    "keras.activations.",
    "keras.callbacks.",
)
# Inside a trusted module, still not: it sends the metrics to a URL.
UNTRUSTED = ("keras.callbacks.RemoteMonitor",)
# Nor callables that write or fetch files (`kdist.data.write_tfrecords`, ...).
UNTRUSTED_VERBS = ("write", "save", "export", "remove", "delete", "download", "load_model")


def _trusted(target: str) -> bool:
    name = target.rsplit(".", 1)[-1].lower()
    return (
        target.startswith(TRUSTED_PREFIXES)
        and target not in UNTRUSTED
        and not name.startswith(UNTRUSTED_VERBS)
    )


def _targets(node: Any, key: str = "") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for name, value in node.items():
            path = f"{key}.{name}" if key else str(name)
            if name == "_target_":
                found.append((path, value))
            else:
                found.extend(_targets(value, path))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(_targets(value, f"{key}[{i}]"))
    return found


def check_trusted_targets(
    cfg: DictConfig | ListConfig | dict[str, Any], *, source: str, exempt: tuple[str, ...] = ()
) -> None:
    """Refuse a config read from a file when a `_target_` names code outside the allow-list.

    Args:
        cfg: the config read from `source`.
        source: the file or folder it was read from, for the message.
        exempt: dotted keys the user set on the command line (their own targets, and
            everything under them, are trusted). Defaults to `()`.

    Raises:
        ConfigError: naming the first key whose `_target_` is not trusted, its value and
            the flag that allows it.
    """
    container = (
        OmegaConf.to_container(cfg, resolve=False)
        if isinstance(cfg, (DictConfig, ListConfig))
        else cfg
    )
    for key, target in _targets(container):
        if any(key == e or key.startswith(f"{e}.") or key.startswith(f"{e}[") for e in exempt):
            continue
        if isinstance(target, str) and _trusted(target):
            continue
        raise ConfigError(
            key,
            f"in {source} names code outside kdist and Keras, which reading a run folder "
            "does not run",
            value=target,
            hint=f"pass {TRUST_FLAG}=true if you trust whoever wrote this run folder",
        )
