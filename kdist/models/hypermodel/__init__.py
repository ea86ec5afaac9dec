"""keras-tuner hypermodels as kdist models: a `build_model(hp)` function or a `HyperModel`.

`model._target_` names a hypermodel when it is a `keras_tuner.HyperModel` (class or
instance) or a callable whose first parameter is named `hp`, keras-tuner's habit:

```python
def build_model(hp):
    model = keras.Sequential([
        keras.layers.Dense(hp.Int("units", 32, 128, step=32), activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model
```

The values of its hyperparameters come from the config node `model.hp` (e.g.
`++model.hp.units=64`); every hyperparameter it declares without a value there takes
keras-tuner's default, so `python -m kdist.train model=custom model._target_=my.build_model`
trains the default model. `kdist.tune` finds the space with `search_space`, as keras-tuner's
tuner does (build with the defaults, then once more for every conditional scope not yet
active), and sets each trial's values in `model.hp`.

One module per job: `target` (which targets are hypermodels, how a config names one),
`values` (the values in `model.hp` and their domains), `build` and `space`.
"""

from kdist.models.hypermodel.build import build
from kdist.models.hypermodel.space import SpaceFound, search_space
from kdist.models.hypermodel.target import HP_KEY, given_in_notebook, is_hypermodel, locate
from kdist.models.hypermodel.values import hp_values

__all__ = [
    "HP_KEY",
    "SpaceFound",
    "build",
    "given_in_notebook",
    "hp_values",
    "is_hypermodel",
    "locate",
    "search_space",
]
