"""The site's pages that are made by running kdist: the executed notebooks
(`kdist.pages.notebooks`), the troubleshooting page (`kdist.pages.troubleshooting`, its
clusters part `kdist.pages.cluster_troubles`) and the figures (`kdist.pages.figures`,
`kdist.pages.diagrams`). `python -m kdist.docs` writes them beside the configuration
reference."""

from kdist.pages.notebooks import refresh_notebooks, stale_notebooks

__all__ = ["refresh_notebooks", "stale_notebooks"]
