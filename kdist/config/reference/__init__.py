"""The configuration reference (`docs/config/`), generated from the configs themselves.

Every page is generated from `conf/` and the typed schemas in `kdist/config/schema.py`, so
it cannot drift from them: the keys and their defaults come from the option's YAML merged
over its schema, the types from the schema's annotations (or, under a `_target_` node,
from the callable's signature), and the descriptions from the YAML's comments, the
schema's comments and the `Args:` of the kdist callable a node names. One module per
step: `sources` (reading them), `rows` (an option flattened into rows), `render` (a
group's page) and `pages` (`generate`, `check`, `write`). `python -m kdist.docs` runs it.
"""

from kdist.config.reference.pages import HAND_WRITTEN, check, generate, write

__all__ = ["HAND_WRITTEN", "check", "generate", "write"]
