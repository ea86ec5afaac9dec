"""The process a kdist command runs in, before any model: logs, threads, devices, exit statuses.

`quiet` silences TensorFlow's start-up, `interrupt` turns Ctrl-C into one line, `runtime`
sets up seeds, devices, precision and threads from the `runtime` config group,
`exit_codes` lists the statuses every command exits with, `log_level` reads the log level
a command line asks for.
"""
