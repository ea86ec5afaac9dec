"""Hyperparameter search with keras-tuner, every trial a kdist training job (`kdist.tune`)."""

from kdist.tuning.distributed import (
    DeadlineOracleClient,
    OracleError,
    OracleServer,
    OracleUnreachable,
    Role,
    resolve_role,
    tuner_environment,
)
from kdist.tuning.plan import TrialPlan
from kdist.tuning.search import SearchResult, run
from kdist.tuning.space import Space, format_value, parse_value
from kdist.tuning.tuner import FatalConfigError, KdistTuner

__all__ = [
    "DeadlineOracleClient",
    "FatalConfigError",
    "KdistTuner",
    "OracleError",
    "OracleServer",
    "OracleUnreachable",
    "Role",
    "SearchResult",
    "Space",
    "TrialPlan",
    "format_value",
    "parse_value",
    "resolve_role",
    "run",
    "tuner_environment",
]
