"""`python -m kdist.docs`: write the generated pages of `docs/`, the site's reference.

Four kinds of page are generated, so they cannot drift from what they describe:

- `docs/config/`: a page per config group, from `conf/` and the typed schemas in
  `kdist/config/schema.py` (the generator is `kdist.config.reference`);
- `docs/troubleshooting.md`: kdist's exit statuses and the refusals a new user meets
  first, with the messages kdist prints (`kdist.pages.troubleshooting` runs them);
- `docs/notebooks/`: each notebook of `recipes/notebooks/` executed, with its outputs and
  plots (`kdist.pages.notebooks`; mkdocs-jupyter renders them), when run from a checkout;
- `docs/figures/*.svg`: the path of a run, the sync modes, and charts of the measured
  numbers of `benchmarks/results/` (`kdist.pages.figures`), when run from a checkout.
  An executed copy records the cells it was run from: a notebook is re-run only when its
  cells changed (`--rerun-notebooks` re-runs them all).

A test checks that the committed `docs/` equals what this generates; `make docs` rewrites
the pages, then builds the site (`mkdocs build --strict`, see `mkdocs.yml`).

Example:

```bash
python -m kdist.docs              # the checkout's docs/config/, ...; run the changed notebooks
python -m kdist.docs --check      # exit 1 and name the stale pages if docs/ is out of date
```
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kdist.config import reference
from kdist.config.errors import ConfigError, exit_with
from kdist.pages import refresh_notebooks, stale_notebooks
from kdist.process.exit_codes import EXIT_FAILED

__all__ = ["CHECKOUT", "check", "generate", "main", "write"]

# The checkout this kdist runs from (an installed wheel's folder holds no mkdocs.yml).
CHECKOUT = Path(__file__).resolve().parents[1]


def generate() -> dict[str, str]:
    """Every generated page of `docs/`: relative path -> its text (Markdown, or SVG)."""
    from kdist.pages.figures import figures
    from kdist.pages.troubleshooting import troubleshooting_page

    pages = reference.generate()
    pages["troubleshooting.md"] = troubleshooting_page()
    pages.update(figures())
    return dict(sorted(pages.items()))


def check(folder: str | Path = "docs") -> list[str]:
    """The generated pages of `folder` that are stale, missing or extra (see `generate`),
    and the executed notebooks that are not current (`kdist.pages.notebooks`).

    Args:
        folder: the docs folder. Defaults to `"docs"`.

    Returns:
        Relative paths; empty when `folder` is up to date.
    """
    return reference.check(folder, generate()) + stale_notebooks(folder)


def write(folder: str | Path = "docs", *, rerun_notebooks: bool = False) -> list[Path]:
    """Write every generated page under `folder`, removing generated pages now gone, and
    execute the notebooks whose cells changed.

    Args:
        folder: the docs folder. Defaults to `"docs"`.
        rerun_notebooks: execute every notebook, changed or not. Defaults to `False`.

    Returns:
        The paths written or removed.
    """
    written = reference.write(folder, generate())
    return written + refresh_notebooks(folder, force=rerun_notebooks)


def _checkout_docs() -> Path:
    """The `docs/` of the kdist checkout this module runs from, wherever the command runs.

    A contributor's generator: run from an installed kdist it would write `./docs` into
    whatever folder it was started in.
    """
    if not (CHECKOUT / "mkdocs.yml").is_file():
        exit_with(
            ConfigError(
                "--out",
                f"kdist docs writes the pages of a kdist checkout, and {CHECKOUT} is not a "
                "checkout (no mkdocs.yml)",
                hint="run it from a clone of kdist, or name a folder with --out DIR",
            )
        )
    return CHECKOUT / "docs"


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m kdist.docs`."""
    from kdist.process.runtime import quiet_tensorflow

    quiet_tensorflow()  # the generator imports TensorFlow; `import kdist` quiets nothing
    parser = argparse.ArgumentParser(
        prog="python -m kdist.docs",
        description=(
            "Generate docs/config/, docs/troubleshooting.md, docs/notebooks/ and "
            "docs/figures/ from kdist's configs, messages, notebooks and benchmark results."
        ),
    )
    parser.add_argument(
        "--out", default=None, help="the docs folder (default: the kdist checkout's docs/)"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the folder differs from the generated pages"
    )
    parser.add_argument(
        "--rerun-notebooks",
        action="store_true",
        help="execute every notebook, even those whose cells did not change",
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = str(_checkout_docs())
    if args.check:
        stale = check(args.out)
        if stale:
            print(
                f"{args.out}/ is out of date ({', '.join(stale)}); run `make docs`",
                file=sys.stderr,
            )
            raise SystemExit(EXIT_FAILED)
        print(f"{args.out}/ is up to date")
        return
    written = write(args.out, rerun_notebooks=args.rerun_notebooks)
    print(
        f"wrote {len(written)} page(s) under {args.out}/" if written else f"{args.out}/ unchanged"
    )


if __name__ == "__main__":
    main()
