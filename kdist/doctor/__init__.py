"""`python -m kdist.doctor`: is this install able to train, and under which strategies?

It prints one table: the versions of Python and of kdist's dependencies (against the
versions kdist requires), known-bad combinations, the devices TensorFlow sees, a short
training run under every strategy in `conf/strategy/` (each in its own process with a
time limit, so a hang cannot stall the doctor), and the cluster environment (TF_CONFIG,
SLURM, Kubernetes). It exits with status 1 when a required check fails, else 0.

The doctor's own process never imports TensorFlow: a broken install shows up as a
failed row instead of a crash.

Example:

```bash
python -m kdist.doctor                          # everything
python -m kdist.doctor --strategies mirrored    # probe one strategy
python -m kdist.doctor --no-probes --json       # versions, devices and cluster as JSON
```

Modules: `versions`, `rules` (known-bad combinations), `probes` (TensorFlow and training
runs in subprocesses), `environment` (devices and cluster), `table` (`Check`, `render`)
and `checkup` (`run_doctor`, `main`).
"""

from kdist.doctor.checkup import main, run_doctor
from kdist.doctor.environment import ENV_VARS, check_cluster, check_launch_network
from kdist.doctor.probes import (
    MULTI_PROCESS,
    PROBE_OVERRIDES,
    ProbeResult,
    run_probe,
    strategy_options,
)
from kdist.doctor.rules import RULES, Rule, check_rules
from kdist.doctor.table import Check, render
from kdist.doctor.versions import FALLBACK_REQUIREMENTS, check_versions, requirements

__all__ = [
    "ENV_VARS",
    "FALLBACK_REQUIREMENTS",
    "MULTI_PROCESS",
    "PROBE_OVERRIDES",
    "RULES",
    "Check",
    "ProbeResult",
    "Rule",
    "check_cluster",
    "check_launch_network",
    "check_rules",
    "check_versions",
    "main",
    "render",
    "requirements",
    "run_doctor",
    "run_probe",
    "strategy_options",
]
