"""Override text Hydra cannot read, said in one line before Hydra parses it.

Hydra's override grammar takes plain ASCII outside quotes. A character pasted from a web
page or typed in another keyboard layout (a full-width digit U+FF13, an invisible
zero-width space, a right-to-left override that reorders what the terminal shows) makes it
fail with `LexerNoViableAltException`, which does not say which character is wrong; a
whole number of 100,000 digits makes it fail on Python's limit on converting long
integers. Each is named here: the character's code point and name, where it sits,
and how to type the override plainly.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from typing import Any

from kdist.config.errors import ConfigError
from kdist.config.path_limits import check_path_length

__all__ = ["check_override_text", "describe_character"]

# Unquoted whole numbers in a value: Hydra converts each with `int()`.
_WHOLE_NUMBER = re.compile(r"(?<![\w.])[+-]?\d[\d_]*(?![\w.])")
# Hydra's folders: one named too long fails in Hydra (a traceback) before kdist checks it.
_FOLDER_KEYS = ("hydra.run.dir", "hydra.sweep.dir")
# Python's default limit on the digits `int()` converts (`sys.get_int_max_str_digits`).
_DIGITS = 4300
# Characters a terminal shows as nothing (format controls, unusual spaces).
_INVISIBLE = ("Cf", "Cc", "Zs", "Zl", "Zp")


def describe_character(char: str) -> str:
    """`U+FF13 FULLWIDTH DIGIT THREE`: a character's code point and Unicode name."""
    name = unicodedata.name(char, "") or f"({unicodedata.category(char)})"
    return f"U+{ord(char):04X} {name}"


def _unquoted(text: str) -> Iterator[tuple[int, str]]:
    """The characters of `text` outside Hydra's quotes, with their index."""
    quote = ""
    escaped = False
    for index, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
            continue
        if char in "'\"":
            quote = char
            continue
        yield index, char


def _shown(text: str) -> str:
    """`text` with each character a terminal would not show as itself as `\\uXXXX` (a
    right-to-left override would reorder the rest of the line)."""
    return "".join(
        c if c.isprintable() else c.encode("ascii", "backslashreplace").decode() for c in text
    )


def _plain_form(char: str) -> str | None:
    """The ASCII a character stands for (U+FF13 -> `3`), `""` for an invisible one, else None."""
    if unicodedata.category(char) in _INVISIBLE and char not in "\u3000\u00a0":
        return ""
    form = unicodedata.normalize("NFKC", char)
    return form if form.isascii() else None


def _check_characters(override: str) -> None:
    odd = [(index, char) for index, char in _unquoted(override) if not char.isascii()]
    if not odd:
        return
    index, char = odd[0]
    equals = override.find("=")
    in_key = equals < 0 or index < equals
    key = _shown(override[:equals] if equals >= 0 else override)
    plain_form = _plain_form(char)
    more = f" (and {len(odd) - 1} more such)" if len(odd) > 1 else ""
    where = f"at character {index + 1} (in the {'key' if in_key else 'value'}){more}"
    kind = "an invisible character" if plain_form == "" else "not plain ASCII"
    problem = f"{describe_character(char)} {where} is {kind}; Hydra reads only ASCII outside quotes"
    plain = "".join(c if c.isascii() else (_plain_form(c) or "") for c in override)
    if all(c.isascii() or _plain_form(c) is not None for _, c in odd):
        fix = f"type it plainly: {plain}"
    else:
        fix = "type it in ASCII"
    if in_key:
        fix += " (a key cannot be quoted)"
    elif plain_form != "":
        # Quoted, Hydra reads any character (a path named in another script, say).
        value = override[equals + 1 :]
        fix += f", or quote the value to keep the text as it is: '{key}=\"{_shown(value)}\"'"
    if in_key:
        raise ConfigError(key, problem, hint=fix)
    raise ConfigError(key, problem, value=override[equals + 1 :], hint=fix)


def _check_numbers(override: str) -> None:
    key, equals, value = override.partition("=")
    if not equals:
        return
    # Python 3.10 before 3.10.7 has no limit: the default of the later ones, for the same line.
    limit = getattr(sys, "get_int_max_str_digits", lambda: _DIGITS)() or _DIGITS
    outside = dict(_unquoted(value))
    unquoted = "".join(outside.get(index, " ") for index in range(len(value)))
    for match in _WHOLE_NUMBER.finditer(unquoted):
        digits = sum(char.isdigit() for char in match.group())
        if digits > limit:
            raise ConfigError(
                key,
                f"its value holds a whole number of {digits} digits; Python reads at most "
                f"{limit} digits in a number, and no config key needs as many",
                hint="give a smaller number (or quote it to pass it as text)",
            )


def _check_folders(override: str) -> None:
    key, equals, value = override.partition("=")
    key = key.lstrip("+")
    if not equals or key not in _FOLDER_KEYS or "${" in value or "," in value:
        return  # an interpolation (`${now:...}`) or a sweep: known once composed
    check_path_length(key, value.strip("'\""))


def _check_grammar(override: str, parser: Any) -> None:
    from hydra.errors import OverrideParseException

    try:
        parser.parse_overrides([override])
    except OverrideParseException as error:
        said = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = next((line for line in said if not line.startswith(("See ", "Error parsing"))), "")
        key, equals, value = override.partition("=")
        opened = [(o, c) for o, c in ("[]", "{}", "()") if value.count(o) > value.count(c)]
        if not equals:
            hint = "write it as key=value (e.g. trainer.epochs=3)"
        elif opened:
            hint = f"close its '{opened[0][0]}' with '{opened[0][1]}'"
        elif value.count("'") % 2 or value.count('"') % 2:
            hint = "close its quote"
        else:
            hint = "quote the value to keep it as text: " + f"{key}='{value}'"
        hint += " (the grammar: https://hydra.cc/docs/advanced/override_grammar/basic/)"
        problem = f"is not an override Hydra can read ({reason or 'a syntax error'})"
        if not equals:
            raise ConfigError(override, problem, hint=hint) from None
        raise ConfigError(key.strip(), problem, value=value, hint=hint) from None


def check_override_text(overrides: Sequence[str]) -> None:
    """Refuse override text that Hydra's grammar or Python's `int()` cannot read.

    Args:
        overrides: Hydra overrides, e.g. `["trainer.epochs=3"]`.

    Raises:
        ConfigError: for a character outside quotes that is not ASCII (a full-width digit,
            a zero-width space, a right-to-left override), naming it by code point and
            name and where it sits, with the override typed plainly; or for a whole number
            longer than Python converts (`sys.get_int_max_str_digits()`), naming the key;
            or for `hydra.run.dir`/`hydra.sweep.dir` over the file system's limits
            (`kdist.config.path_limits`); or for an override Hydra's grammar cannot
            read (an unclosed `[`, `{` or quote, no `=`), named before a multirun's
            sweeper reports it as Hydra's own error (status 1).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()  # one per call: it builds Hydra's grammar objects
    for override in overrides:
        _check_characters(override)
        _check_numbers(override)
        _check_folders(override)
        _check_grammar(override, parser)
