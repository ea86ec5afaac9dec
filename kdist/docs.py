"""`python -m kdist.docs`: write `docs/`, a page per config group, from the configs themselves.

Every page is generated from `conf/` and the typed schemas in `kdist/config/schema.py`
(the generator is `kdist.config.reference`), so it cannot drift from them. A test checks
that the committed `docs/` equals what it generates (`make docs` rewrites it).

Example:

```bash
python -m kdist.docs              # rewrite docs/
python -m kdist.docs --check      # exit 1 and name the stale pages if docs/ is out of date
```
"""

from __future__ import annotations

import argparse
import sys

from kdist.config.reference import check, generate, write
from kdist.process.exit_codes import EXIT_FAILED

__all__ = ["check", "generate", "main", "write"]


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m kdist.docs`."""
    from kdist.process.runtime import quiet_tensorflow

    quiet_tensorflow()  # the generator imports TensorFlow; `import kdist` quiets nothing
    parser = argparse.ArgumentParser(
        prog="python -m kdist.docs", description="Generate docs/ from kdist's configs."
    )
    parser.add_argument("--out", default="docs", help="the docs folder (default: docs)")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the folder differs from the generated pages"
    )
    args = parser.parse_args(argv)
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
    written = write(args.out)
    print(
        f"wrote {len(written)} page(s) under {args.out}/" if written else f"{args.out}/ unchanged"
    )


if __name__ == "__main__":
    main()
