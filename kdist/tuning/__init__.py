"""Hyperparameter search with keras-tuner, every trial a kdist training job (`kdist.tune`).

What users call: `run` (a search from a composed tune config) and the `SearchResult` it
returns. The parts live in their own modules: `driver` (the search), `space`, `plan`
(one trial's command), `tuner`, `oracles`, `results`, `hparams`, and for a distributed
search `roles`, `oracle_chief` and `oracle_client`.
"""

from kdist.tuning.driver import SearchResult, run

__all__ = ["SearchResult", "run"]
