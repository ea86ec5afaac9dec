"""The chief of a parameter-server cluster whose user hands `Experiment.fit` a generator.

Run by `kdist.launch.run(..., ps=1, module="ps_generator")` (test_corpus.py): kdist must
refuse the generator before training, in one line naming `x`. Prints `REFUSED <message>`
and exits 0 when it does, `TRAINED` and exits 1 when it does not.
"""

from __future__ import annotations

import sys

import keras
import numpy as np

import kdist


def main(argv: list[str]) -> int:
    overrides = [a for a in argv if not a.startswith("hydra.")]
    overrides += [f"run_dir={a.split('=', 1)[1]}" for a in argv if a.startswith("hydra.run.dir=")]
    exp = kdist.Experiment(kdist.compose(overrides))
    with exp.strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
        model.compile(
            optimizer="adam",
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    exp.build_model(model=model)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype("float32")
    y = rng.integers(0, 3, size=64)

    def batches():
        while True:
            for i in range(0, 64, 16):
                yield x[i : i + 16], y[i : i + 16]

    try:
        exp.fit(batches(), steps_per_epoch=4, epochs=1, verbose=0)
    except kdist.ConfigError as error:
        print("REFUSED", str(error).replace("\n", "\\n"), flush=True)
        return 0
    print("TRAINED", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
