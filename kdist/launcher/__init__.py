"""The local cluster of `python -m kdist.launch`: checks, tasks, supervisor, elastic, GPUs."""
