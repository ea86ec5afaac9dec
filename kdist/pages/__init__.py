"""The site's pages that are made by running kdist: the executed notebooks
(`kdist.pages.notebooks`) and the troubleshooting page (`kdist.pages.troubleshooting`).
`python -m kdist.docs` writes them beside the configuration reference."""

from kdist.pages.notebooks import refresh_notebooks, stale_notebooks

__all__ = ["refresh_notebooks", "stale_notebooks"]
