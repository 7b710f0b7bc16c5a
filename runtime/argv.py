"""What a value may look like once it is a token of an engine's or router's argv.

Launchers parse their argv with argparse, so a value that starts with `-` is read as another flag,
and a newline, NUL or other control character breaks logs, process tables and YAML manifests (a NUL
makes `exec` fail outright). Spec fields that reach an argv are checked with `text_problem` when
the spec is parsed; `runtime.launch` checks every token again before it hands a plan out.
"""

from __future__ import annotations

import re
import unicodedata

# argparse's own test for "this is a negative number, not an option" (`_negative_number_matcher`):
# Plinth emits `--chunked-prefill-size -1`, which argparse reads as a value.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
# Control (Cc), format (Cf, e.g. bidi overrides), surrogates (Cs) and line/paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


class UnsafeArgvError(ValueError):
    """A launch plan would carry a token the launcher could misread. `field` is the spec field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def unprintable(text: str) -> str | None:
    """The first control, format or separator character of `text`, if any."""
    if text.isascii() and text.isprintable():
        return None  # printable ASCII has none of those categories; most tokens are (and fast)
    return next((ch for ch in text if unicodedata.category(ch) in _UNPRINTABLE), None)


def parses_as_flag(token: str) -> bool:
    """Whether argparse would take `token` for an option rather than a value."""
    return token.startswith("-") and not _NEGATIVE_NUMBER.match(token)


def text_problem(text: str) -> str | None:
    """Why `text` may not be a value in an argv (None when it may)."""
    char = unprintable(text)
    if char is not None:
        return f"contains the control character U+{ord(char):04X}"
    if text.startswith("-"):
        return "starts with '-', so the launcher would read it as a flag"
    return None


def token_problem(token: str) -> str | None:
    """Like `text_problem`, but for a token Plinth emits itself: negative numbers are values."""
    char = unprintable(token)
    if char is not None:
        return f"contains the control character U+{ord(char):04X}"
    if parses_as_flag(token):
        return "would be read as a flag"
    return None
