"""`python -m kdist.evaluate run_dir=...`: reload a finished run's model and evaluate it.

The run's config (`.hydra/config.yaml`, or `config.yaml` for a run from the Python API)
rebuilds the strategy and the validation data; the model is the run's `model.keras`,
loaded in Keras safe mode. The validation metrics are printed one per line,
`validation <name>: <value>`, and match the run's `metrics.json`.

Further arguments override the run's config: `key=value` for any key, and
`group=option` replaces a whole group (e.g. `strategy=one_device` to evaluate a
multi-worker run in one process).

A run folder may come from someone else: its config is read within size and alias
limits, its interpolations are resolved by resolvers that build no object (`oc.env`,
`hydra:` and resolvers other code registered are refused), and it is rebuilt only when
every `_target_` of the resolved config names a kdist or Keras building block
(`kdist.config.trust`), else the command stops with status 2 naming the key.
`trust_run_dir=true` lifts that check for a folder you trust (its config can then run
any importable code, as a training config can).

With `watch=true` it is a sidecar evaluator (`kdist.evaluation.sidecar`): it evaluates every
checkpoint of a run that is still training, as each appears, into `eval.csv` and
`tensorboard/eval/`, and stops when the run has finished (`poll_seconds=5`,
`timeout=` seconds to give up).

Example:

```bash
python -m kdist.evaluate run_dir=outputs/2026-11-21/10-00-00 watch=true
python -m kdist.evaluate run_dir=outputs/2026-11-21/10-00-00
python -m kdist.evaluate run_dir=outputs/2026-11-21/10-00-00 strategy=one_device
python -m kdist.evaluate run_dir=runs/from-a-colleague trust_run_dir=true   # custom model code
```
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from kdist.command import help_from_docstring, prepare_command
from kdist.config.errors import ConfigError, exit_with
from kdist.config.trust import TRUST_FLAG
from kdist.evaluation.reopen import evaluate_run
from kdist.process.runtime import quiet_tensorflow
from kdist.runs.fileio import LinkError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m kdist.evaluate run_dir=... [overrides]`."""
    prepare_command()  # saved configs may name module paths that moved
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        print(help_from_docstring(__doc__, "kdist.evaluate"))
        raise SystemExit(0)
    run_dirs = [a.split("=", 1)[1] for a in args if a.startswith("run_dir=")]
    trust = [a.split("=", 1)[1] for a in args if a.startswith(f"{TRUST_FLAG}=")]
    sidecar = {
        key: [a.split("=", 1)[1] for a in args if a.startswith(f"{key}=")] for key in _SIDECAR_KEYS
    }
    own = ("run_dir=", f"{TRUST_FLAG}=", *(f"{key}=" for key in _SIDECAR_KEYS))
    overrides = [a for a in args if not a.startswith(own)]
    if len(run_dirs) != 1 or not run_dirs[0]:
        exit_with(ConfigError("run_dir", "is required once", hint="run_dir=outputs/DATE/TIME"))
    if any(value.lower() not in ("true", "false") for value in trust):
        exit_with(ConfigError(TRUST_FLAG, "must be true or false", value=trust[-1]))
    quiet_tensorflow()
    if sidecar["watch"] and sidecar["watch"][-1].lower() == "true":
        _watch(run_dirs[0], overrides, sidecar, trust=bool(trust) and trust[-1].lower() == "true")
        return
    try:
        metrics = evaluate_run(
            run_dirs[0], overrides, trust_run_dir=bool(trust) and trust[-1].lower() == "true"
        )
    except ConfigError as error:
        exit_with(error)
    for name, value in metrics.items():
        print(f"validation {name}: {value:.9g}", flush=True)
    print(json.dumps({"validation": metrics}), flush=True)


_SIDECAR_KEYS = ("watch", "poll_seconds", "timeout")


def _watch(
    run_dir: str, overrides: list[str], options: dict[str, list[str]], *, trust: bool
) -> None:
    """`watch=true`: the sidecar evaluator (`kdist.evaluation.sidecar.watch`)."""
    from kdist.evaluation.sidecar import watch

    try:
        poll = float(options["poll_seconds"][-1]) if options["poll_seconds"] else 5.0
        timeout = float(options["timeout"][-1]) if options["timeout"] else None
    except ValueError:
        exit_with(ConfigError("poll_seconds/timeout", "must be numbers of seconds"))
    try:
        records = watch(run_dir, overrides, trust_run_dir=trust, poll_seconds=poll, timeout=timeout)
    except ConfigError as error:
        exit_with(error)
    except LinkError as error:  # eval.csv made a link while the sidecar ran
        exit_with(ConfigError("run_dir", str(error), value=run_dir))
    print(f"[sidecar] evaluated {len(records)} checkpoint(s); the run has finished", flush=True)


if __name__ == "__main__":
    main()
