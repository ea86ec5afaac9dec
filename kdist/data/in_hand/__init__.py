"""Data given to `Experiment.fit` in Python, as Keras's `fit(x, y, ...)` takes it.

`given_data` turns `fit`'s data arguments into a `kdist.data.Source` for kdist's input
pipeline, so data in hand is batched per replica, sharded and resumed step-exactly like
configured data. One module per kind of data: `arrays` (NumPy arrays, the source behind
`data=npz`), `datasets` (`tf.data.Dataset`, batched or not), `streams` (a
`keras.utils.PyDataset` or a generator, one pipeline in this process); `fit_data` tells
them apart and checks them against the strategy, `source` holds what they become, and
`inputs` checks the data against the model. Each problem is a `ConfigError` naming the
argument (`x`, `y`, `batch_size`, ...) before any training.
"""

from kdist.data.in_hand.fit_data import given_data
from kdist.data.in_hand.inputs import check_inputs
from kdist.data.in_hand.source import DatasetSource, Given, given

__all__ = ["DatasetSource", "Given", "check_inputs", "given", "given_data"]
