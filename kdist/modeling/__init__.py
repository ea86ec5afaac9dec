"""Building blocks of the run's model: loss, metrics, optimizers and schedules.

`compiling` builds the loss, metrics and loss weights, `optimizers`, `schedules` and
`lazy_optimizers` the optimizer. Building the run's model in the strategy's scope and
planning its batches belong to the job that uses them (`kdist.experiment.build`,
`kdist.experiment.run_data`).
"""
