"""Hyperparameter search with keras-tuner, every trial a kdist training job (`kdist.tune`).

What users call: `run` (a search from a composed tune config) and the `SearchResult` it
returns; from a notebook, `search` (or `Tuner`): a `build_model(hp)` and the data in
hand. The parts live in their own modules: `driver` (the search), `space`, `plan` (one
trial's command), `tuner`, `notebook`, `oracles`, `results`, `hparams`, and for a
distributed search `roles`, `oracle_chief` and `oracle_client`.
"""

from kdist.tuning.driver import SearchResult, run
from kdist.tuning.notebook import Tuner, search

__all__ = ["SearchResult", "Tuner", "run", "search"]
