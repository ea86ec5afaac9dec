"""Packaged Hydra configs (the repository's top-level `conf/`)."""
