"""Hyperparameter search with keras-tuner, every trial a kdist training job (`kdist.tune`).

What users call: `run` (a search from a composed tune config) and the `SearchResult` it
returns; from a notebook, `search` (or `Tuner`): a `build_model(hp)` and the data in
hand; `load_best` (a search's best trial as a config, through the trust check). The parts
live in their own modules: `driver` (the search), `space`, `plan` (one trial's command),
`tuner`, `notebook`, `oracles`, `results`, `hparams`, `folder` (who owns a search's folder),
`fit_override` (a `HyperModel.fit`), and for a distributed search `roles`,
`oracle_chief` and `oracle_client`.

The names are imported on first use: `kdist.tuning.folder` and `kdist.tuning.results`
are read by the command line before TensorFlow starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kdist.tuning.driver import SearchResult, run
    from kdist.tuning.notebook import Tuner, search
    from kdist.tuning.results import load_best

__all__ = ["SearchResult", "Tuner", "load_best", "run", "search"]

_HOMES = {
    "SearchResult": "kdist.tuning.driver",
    "run": "kdist.tuning.driver",
    "Tuner": "kdist.tuning.notebook",
    "search": "kdist.tuning.notebook",
    "load_best": "kdist.tuning.results",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'kdist.tuning' has no attribute {name!r}")
