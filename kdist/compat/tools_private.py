"""keras-tuner's and Hydra's private names that kdist uses, each reached in one function.

keras-tuner's distributed search (the chief's oracle service and its client, their
protocol buffers) is not public; nor is the reading of a dotted path the way Hydra's
`instantiate` reads it, its command-line parser, or composing a config from a folder
outside a Hydra app. Each function names the upstream symbol and the kdist code that
needs it when an upgrade moves it (`kdist.compat.upstream.UpstreamMoved`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Iterator
from typing import Any

from kdist.compat.upstream import (
    UpstreamMoved,
    private_attribute,
    private_import,
    private_module,
)

__all__ = [
    "KERAS_TUNER_PRIVATE",
    "app_hydra",
    "config_root",
    "hydra_args_parser",
    "hydra_class",
    "hydra_config_search_path",
    "hydra_locate",
    "hydra_run_parts",
    "is_basic_sweeper",
    "job_return_value",
    "oracle_client_class",
    "oracle_servicer_class",
    "resolver_registry",
    "resolvers_replaced",
    "set_oracle_seed",
    "space_has",
    "tuner_protos",
]

# keras-tuner's private modules kdist imports (the rest it uses are public).
KERAS_TUNER_PRIVATE = "keras_tuner.src"
_DISTRIBUTE = f"{KERAS_TUNER_PRIVATE}.distribute"


def oracle_servicer_class() -> type:
    """keras-tuner's gRPC `OracleServicer`, which the chief's oracle service extends."""
    return private_import(
        f"{_DISTRIBUTE}.oracle_chief", "OracleServicer", "kdist.tuning.oracle_chief.OracleServer"
    )


def oracle_client_class() -> type:
    """keras-tuner's `OracleClient`, which kdist's client with deadlines extends."""
    return private_import(
        f"{_DISTRIBUTE}.oracle_client",
        "OracleClient",
        "kdist.tuning.oracle_client.DeadlineOracleClient",
    )


def tuner_protos() -> Any:
    """keras-tuner's protocol buffers of the oracle service (`get_service`, `get_service_grpc`)."""
    return private_module(
        f"{KERAS_TUNER_PRIVATE}.protos", "kdist.tuning.oracle_chief/oracle_client"
    )


def space_has(space: Any, name: str, conditions: Any) -> bool:
    """Whether `space` (`keras_tuner.HyperParameters`) declares `name` under `conditions`."""
    exists = private_attribute(
        space,
        "_exists",
        "keras_tuner.HyperParameters._exists",
        "kdist.models.hypermodel.space.search_space",
    )
    return bool(exists(name, conditions))


def hydra_locate(path: str) -> Any:
    """The object a dotted path names, found as Hydra's `instantiate` finds `_target_`."""
    locate = private_import("hydra._internal.utils", "_locate", "kdist (reading a _target_)")
    return locate(path)


def hydra_args_parser() -> Any:
    """Hydra's command-line parser (`hydra._internal.utils.get_args_parser`)."""
    make = private_import(
        "hydra._internal.utils", "get_args_parser", "kdist commands (reading Hydra's flags)"
    )
    return make()


def hydra_class() -> type:
    """Hydra's app object, which composes a config from a search path outside an app."""
    return private_import("hydra._internal.hydra", "Hydra", "kdist.config.compose")


def hydra_config_search_path(config_dir: str | None) -> Any:
    """Hydra's config search path for `config_dir` (`create_config_search_path`)."""
    make = private_import(
        "hydra._internal.utils", "create_config_search_path", "kdist.config.compose"
    )
    return make(config_dir)


_APP = "kdist.train (one composition of a run's config)"


def app_hydra(task_name: str, config_path: str, config_dir: str | None) -> Any:
    """Hydra's app object as `hydra.main(config_path=...)` makes it for the app
    `task_name` (`Hydra.create_main_hydra2`), `--config-dir` searched first."""
    import os

    make_path = private_import("hydra._internal.utils", "create_automatic_config_search_path", _APP)
    search_path = make_path(None, None, config_path)
    if config_dir is not None:
        from hydra.core.config_search_path import SearchPathQuery

        search_path.prepend(
            provider="command-line",
            path=f"file://{os.path.abspath(config_dir)}",
            anchor=SearchPathQuery(provider="schema"),
        )
    hydra = private_import("hydra._internal.hydra", "Hydra", _APP)
    return hydra.create_main_hydra2(task_name=task_name, config_search_path=search_path)


def hydra_run_parts() -> tuple[type, Callable[[Callable[[], Any]], Any]]:
    """What `Hydra.run` (the run of `hydra.main`) needs besides public names: Hydra's
    `Callbacks` class and `run_and_report`, which reports a job's exception as
    `hydra.main` reports it (a short trace, exit status 1). `kdist.train.run_composed`
    runs the sequence."""
    callbacks_class = private_import("hydra._internal.callbacks", "Callbacks", _APP)
    report = private_import("hydra._internal.utils", "run_and_report", _APP)
    return callbacks_class, report


# Hydra's default sweeper (its `hydra/sweeper: basic`), whose class is in Hydra's `_internal`.
_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def is_basic_sweeper(target: Any) -> bool:
    """Whether `target` (a `hydra.sweeper._target_`) names Hydra's basic sweeper, whose
    jobs are the product of the sweeps (`kdist.launcher.sweep_launchers.sweep_jobs`)."""
    return str(target or "") == _BASIC_SWEEPER


def set_oracle_seed(oracle: Any, seed: int) -> None:
    """Seed a keras-tuner oracle: `seed` and the state its random draws advance."""
    private_attribute(
        oracle, "_seed_state", "keras_tuner.Oracle._seed_state", "kdist.tuning.oracles.build"
    )
    oracle.seed = oracle._seed_state = seed


def config_root(node: Any) -> Any:
    """The root config of an OmegaConf node (`Node._get_root`)."""
    root = private_attribute(node, "_get_root", "omegaconf.Node._get_root", "kdist.tuning.oracles")
    return root()


def job_return_value(job_return: Any) -> Any:
    """A Hydra job's return value, or its exception, without re-raising it."""
    return private_attribute(
        job_return,
        "_return_value",
        "hydra.core.utils.JobReturn._return_value",
        "kdist.runs.sweep.SummaryCallback",
    )


_RESOLVERS = threading.RLock()


@contextlib.contextmanager
def resolvers_replaced(keep: Collection[str]) -> Iterator[None]:
    """Within the block, OmegaConf resolves with the registered resolvers named in `keep`
    only; the whole registry is back when the block ends, however it ends. The registry
    is process-wide: the block holds a lock."""
    owner = resolver_registry()
    with _RESOLVERS:
        saved = owner._resolvers
        owner._resolvers = {name: found for name, found in saved.items() if name in keep}
        try:
            yield
        finally:
            owner._resolvers = saved


def resolver_registry() -> Any:
    """OmegaConf's class whose `_resolvers` dict holds every registered resolver.

    `kdist.config.trust` swaps that dict for a smaller one while it resolves a file it
    reads back: OmegaConf has no public way to resolve with a chosen set of resolvers.
    """
    owner = private_import("omegaconf.basecontainer", "BaseContainer", "kdist.config.trust")
    registry = private_attribute(
        owner,
        "_resolvers",
        "omegaconf.basecontainer.BaseContainer._resolvers",
        "kdist.config.trust.safe_resolvers",
    )
    if not isinstance(registry, dict):
        raise UpstreamMoved(
            "omegaconf.basecontainer.BaseContainer._resolvers", "kdist.config.trust"
        )
    return owner
