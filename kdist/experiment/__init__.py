"""`Experiment`: one training job, the same from the command line and from a notebook.

`kdist.experiment.job` assembles the run; `kdist.experiment.fit_data` turns `fit`'s data
arguments into the run's config keys.
"""

from kdist.experiment.job import Experiment

__all__ = ["Experiment"]
