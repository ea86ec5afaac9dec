"""`Experiment`: one training job, the same from the command line and from a notebook.

`kdist.experiment.job` assembles the run; `kdist.experiment.fit_arguments` states `fit`'s
arguments once and turns its data arguments into the run's config keys;
`kdist.experiment.evaluating` runs `evaluate` on data in hand under the strategy.
"""

from kdist.experiment.job import Experiment

__all__ = ["Experiment"]
