"""Count one process's setup work (`tests/test_setup_once.py`).

`python setup_counter.py OUT.json cli <kdist train arguments>` runs `kdist train` in this
process; `python setup_counter.py OUT.json notebook <overrides>` runs
`kdist.Experiment(kdist.compose(overrides)).fit(x, y)`. Either writes, at exit, how many
times each setup function ran (counted by code object with `sys.setprofile`, so calls
through any import name count): the compositions of a config (Hydra's
`ConfigLoaderImpl.load_configuration`, which every composition goes through: kdist's,
Hydra's app's, a sweep's jobs'), `validate`, the cluster's resolution and the resume
check; and kdist's own compositions (`kdist.compose`, `kdist train`'s).
"""

from __future__ import annotations

import atexit
import collections
import json
import sys
import threading


def _watched() -> dict[object, str]:
    # Every composition, Hydra's app's and a sweep's jobs' included.
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    import kdist.config.compose
    import kdist.config.validate
    import kdist.runs.resume_check
    import kdist.train
    from kdist.cluster import discovery

    return {
        ConfigLoaderImpl.load_configuration.__code__: "compose",
        kdist.config.compose.compose.__code__: "kdist_compose",
        kdist.train._compose_app.__code__: "kdist_compose",
        kdist.config.validate.validate.__code__: "validate",
        discovery.resolve.__code__: "cluster",
        kdist.runs.resume_check.check_resume.__code__: "resume",
    }


def main() -> None:
    out, mode, *args = sys.argv[1:]
    watched = _watched()
    counts: collections.Counter[str] = collections.Counter()

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call" and frame.f_code in watched:
            counts[watched[frame.f_code]] += 1

    def write() -> None:
        sys.setprofile(None)
        with open(out, "w") as file:
            json.dump(dict(counts), file)

    atexit.register(write)
    threading.setprofile(profile)
    sys.setprofile(profile)
    if mode == "cli":
        from kdist import train

        sys.argv = ["kdist.train", *args]
        train.main()
    else:
        import numpy as np

        import kdist

        rng = np.random.default_rng(0)
        x = rng.normal(size=(64, 16)).astype("float32")
        y = rng.integers(0, 10, size=64)
        experiment = kdist.Experiment(kdist.compose(args))
        experiment.fit(x, y, epochs=1, batch_size=32, verbose=0)


if __name__ == "__main__":
    main()
