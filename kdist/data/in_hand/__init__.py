"""Data given to `Experiment.fit`, `evaluate` and `predict` in Python, as Keras takes it.

One module per kind of data, as Keras's `trainers/data_adapters` has one adapter per
kind: `arrays` (NumPy arrays, or a dict, list or tuple of them), `datasets`
(`tf.data.Dataset`), `py_dataset` (`keras.utils.PyDataset`), `generators` (a Python
generator); `dispatch` tells them apart (`given_data` for `fit`, `given_batches` for
`evaluate`/`predict`) and checks them against the strategy, `source` holds what they
become for kdist's input pipeline, and `inputs` checks the data against the model (a
dict is matched to the inputs by their names, as in Keras). Each problem is a
`ConfigError` naming the argument (`x`, `y`, `batch_size`, ...) before any training.
"""

from kdist.data.in_hand.dispatch import given_batches, given_data
from kdist.data.in_hand.inputs import check_inputs
from kdist.data.in_hand.source import DatasetSource, Given, given

__all__ = ["DatasetSource", "Given", "check_inputs", "given", "given_batches", "given_data"]
