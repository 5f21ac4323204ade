"""Where things are in a build config's text, so that every error can say `FILE:LINE`: tomllib gives
positions only for syntax errors, and no TOML library the project uses or could (tomli, tomlkit) says where a
value was written, so this small reader places what tomllib has accepted.

The text has already parsed as TOML, so this reader only has to follow valid TOML, and only far enough to
place what the checks name: `[table]` and `[[array]]` headers, the keys of those tables, a top-level
`table.key =`, and a top-level `name = {...}` or `name = [{...}, ...]` with the keys of each inline table
in it (a feed written inline is placed as one written under `[[feeds]]` is). Strings (multi-line ones too)
and comments are skipped whole, so a `[[feeds]]` inside a string is not taken for a header. It reads the
text once, without recursion, and the text is bounded (`plan.MAX_CONFIG_BYTES`).
"""

from __future__ import annotations

import re
import tomllib
from bisect import bisect_left

_SPACES = re.compile(r"[ \t]*")
_WHITE = re.compile(r"[ \t\r\n]*")
_COMMENT = re.compile(r"#[^\n]*")
_BARE = re.compile(r"[A-Za-z0-9_-]+")
# Multi-line strings first, or `"""` would read as an empty string; up to two quotes may end the content.
_STRINGS = (re.compile(r'"""(?:[^"\\]|\\.|"(?!""))*""""{0,2}', re.S), re.compile(r"'''(?:[^']|'(?!''))*''''{0,2}"),
            re.compile(r'"(?:[^"\\\n]|\\.)*"'), re.compile(r"'[^'\n]*'"))
# Anything else a value can be (number, boolean, date and time, which may hold a space): up to what ends it.
_SCALAR = re.compile(r"[^,\[\]{}#\r\n=]+")


def _blank(text: str, pos: int) -> int:
    """Where the spaces, newlines and comments between the items of an array or a table, from `pos`, end (a
    loop of two flat patterns: no pattern here nests a quantifier)."""
    while True:
        pos = _past(_WHITE, text, pos)
        if not text.startswith("#", pos):
            return pos
        pos = _past(_COMMENT, text, pos)


def _past(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where a run of `pattern` (which may be empty: whitespace, comments) from `pos` ends."""
    found = pattern.match(text, pos)
    return found.end() if found else pos


class Lines:
    """Line numbers by `(table, index)` (a header, or an inline table's `{`) and by `(table, index, key)`:
    `index` counts the `[[table]]` headers, or the items of an inline array; the top level is `("", 0)`."""

    def __init__(self, text: str):
        self.tables: dict[tuple[str, int], int] = {}
        self.keys: dict[tuple[str, int, str], int] = {}
        self._text = text
        self._newlines = [m.start() for m in re.finditer("\n", text)]
        try:
            self._statements()
        except ValueError:
            # A construct this reader does not follow (a later TOML than tomllib's): what was placed before
            # it stays right, and an error about what comes after names no line rather than a wrong one.
            pass

    def of(self, table: str, index: int = 0, key: str | None = None) -> int | None:
        found = self.keys.get((table, index, key)) if key else None
        return found or self.tables.get((table, index))

    def _line(self, pos: int) -> int:
        return bisect_left(self._newlines, pos) + 1

    def _statements(self) -> None:
        text, pos = self._text, 0
        table, index, counts, inner = "", 0, dict[str, int](), False
        while (pos := _blank(text, pos)) < len(text):
            line = self._line(pos)
            if text[pos] == "[":
                array = text.startswith("[[", pos)
                names, pos = self._key(pos + 1 + array)
                pos = text.index("]", pos) + 1 + array  # ValueError, should it not be there
                self.keys.setdefault(("", 0, names[0]), line)
                # `[feeds.x]`: a table inside the current feed (or table), which counts as its key `x`;
                # the keys under it are that inner table's, and are not placed.
                table, inner = names[0], len(names) > 1
                if inner:
                    index = counts.get(table, 0)
                    self.keys.setdefault((table, index, names[1]), line)
                else:
                    index = counts[table] = counts.get(table, -1) + 1 if array else 0
                    self.tables.setdefault((table, index), line)
                continue
            names, pos = self._key(pos)
            pos = _past(_SPACES, text, pos + 1)  # past the `=`, where a key ends
            if not table:
                self.keys.setdefault(("", 0, names[0]), line)
                if len(names) > 1:
                    self.keys.setdefault((names[0], 0, names[1]), line)
                else:
                    pos = self._members(pos, names[0])
                    continue
            elif not inner:
                self.keys.setdefault((table, index, names[0]), line)
            pos = self._skip(pos)

    def _key(self, pos: int) -> tuple[list[str], int]:
        """A key, dotted or not, each part bare or quoted, as its parts; and where it ends, after the spaces."""
        text, names = self._text, []
        while True:
            pos = _past(_SPACES, text, pos)
            part = _BARE.match(text, pos) or _STRINGS[2].match(text, pos) or _STRINGS[3].match(text, pos)
            if part is None:
                raise ValueError(f"no key at line {self._line(pos)}")
            quote = part[0][0]
            names.append(part[0] if quote not in "\"'" else part[0][1:-1] if quote == "'"
                         else tomllib.loads(f"k = {part[0]}")["k"])
            pos = _past(_SPACES, text, part.end())
            if not text.startswith(".", pos):
                return names, pos
            pos += 1

    def _members(self, pos: int, name: str) -> int:
        """A top-level value: an inline table is the table `name`; an array's inline tables are its items."""
        text = self._text
        if text.startswith("{", pos):
            return self._inline(pos, name, 0)
        if not text.startswith("[", pos):
            return self._skip(pos)
        pos, index = pos + 1, 0
        while (pos := _blank(text, pos)) < len(text) and text[pos] != "]":
            if text[pos] == ",":
                pos += 1
                continue
            pos = self._inline(pos, name, index) if text[pos] == "{" else self._skip(pos)
            index += 1
        return pos + 1

    def _inline(self, pos: int, table: str, index: int) -> int:
        text = self._text
        self.tables.setdefault((table, index), self._line(pos))
        pos += 1
        while (pos := _blank(text, pos)) < len(text) and text[pos] != "}":
            if text[pos] == ",":
                pos += 1
                continue
            line = self._line(pos)
            names, pos = self._key(pos)
            self.keys.setdefault((table, index, names[0]), line)
            pos = self._skip(_past(_SPACES, text, pos + 1))  # past the `=`
        return pos + 1

    def _skip(self, pos: int) -> int:
        """Past one value, however nested, counting brackets in a loop rather than recursing."""
        text, depth = self._text, 0
        while True:
            pos = _blank(text, pos) if depth else _past(_SPACES, text, pos)
            if pos >= len(text):
                return pos
            char = text[pos]
            if char in "[{":
                depth += 1
                pos += 1
                continue
            if char in "]},=":
                depth -= char in "]}"
                pos += 1
            elif char in "\"'":
                string = next((found for pattern in _STRINGS if (found := pattern.match(text, pos))), None)
                if string is None:
                    raise ValueError(f"no string at line {self._line(pos)}")
                pos = string.end()
            else:
                scalar = _SCALAR.match(text, pos)
                pos = scalar.end() if scalar else pos + 1
            if depth <= 0:
                return pos
