"""How deeply a post's HTML nests, read in one linear pass before any HTML parser sees it.

html5ever (inside nh3) spends time on each start tag that grows with the depth of the open elements:
20,000 nested `<ul><li>` (360 KB) cost it 8 s of CPU, while a megabyte of ordinary post HTML costs
0.1 s. Real posts nest a dozen levels (Discourse's Markdown stops at 20), so a post nesting more than
`MAX_DEPTH` is refused here, in time proportional to its length, and the feed shows its excerpt.

The count must never be lower than what html5ever builds, or a hostile post would pass it. So the text is
tokenized as the HTML standard says, where that decides which `<` starts a tag: quoted attribute values,
comments (ended by `-->`, `--!>` or at once by `<!-->`), bogus comments, and the elements whose content is
text (`style`, `textarea`, `iframe`, ...), which html5ever skips the same way. The tree is modelled
pessimistically: every start tag but the void ones opens an element, and an end tag closes only the
element the model has open last with its name. html5ever closes many elements sooner (`<p><div>`,
`<li><li>`), never later, except by a bounded factor (the `tbody` and `tr` it adds in tables). Where the
standard's rules are too many to follow in a few lines (HTML inside SVG or MathML, a `<!--` inside a
script, raw-text elements inside `select`) the post is refused instead: Discourse's cooked HTML has none
of these.

Written here because no library at hand gives this count: nh3 reports no depth and builds the tree
whose cost is the problem, and the standard library's `html.parser` does not follow the standard's
tokenizer (its comment and raw-text rules differ), so a count built on it could fall below html5ever's.
"""

from __future__ import annotations

import re
import string

from feedbridge.errors import HostileMarkup

MAX_DEPTH = 100
"""Deeper than any post a person writes; html5ever's cost for a megabyte nested this deep is ~0.3 s."""

_VOID = frozenset({
    "area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "img", "input", "keygen",
    "link", "meta", "param", "source", "track", "wbr",
})
_RAW_TEXT = frozenset({"iframe", "noembed", "noframes", "noscript", "style", "textarea", "title", "xmp"})
_FOREIGN = frozenset({"svg", "math"})
# Start tags that leave SVG or MathML for HTML (the standard's breakout list and integration points).
_LEAVES_FOREIGN = frozenset({
    "b", "big", "blockquote", "body", "br", "center", "code", "dd", "div", "dl", "dt", "em", "embed", "font",
    "h1", "h2", "h3", "h4", "h5", "h6", "head", "hr", "i", "img", "li", "listing", "menu", "meta", "nobr", "ol",
    "p", "pre", "ruby", "s", "small", "span", "strike", "strong", "sub", "sup", "table", "tt", "u", "ul", "var",
    "foreignobject", "desc", "title", "mi", "mo", "mn", "ms", "mtext", "annotation-xml",
})

_MARKUP = re.compile(r"<(?:(/?)([A-Za-z][^\t\n\f\r />]*)(>?)|(!--)|[!?/])")
_NOT_SPACE_OR_SLASH = re.compile(r"[^\t\n\f\r /]")
_NOT_SPACE = re.compile(r"[^\t\n\f\r ]")
_NAME_END = re.compile(r"[\t\n\f\r />=]")
_UNQUOTED_END = re.compile(r"[\t\n\f\r >]")
_COMMENT_CLOSER = re.compile(r"--!?>")
_END_TAG_FOLLOWS = frozenset("\t\n\f\r />")
# ASCII only, as the standard lowercases tag names: str.lower() maps the Kelvin sign to "k".
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def check_nesting(html: str, limit: int = MAX_DEPTH) -> int:
    """The deepest nesting of `html` as the module docstring models it; HostileMarkup past `limit`."""
    lowered = html.translate(_ASCII_LOWER)
    stack: list[str] = []
    foreign = 0  # how many of the open elements are svg or math
    deepest = 0
    pos = 0
    while (found := _MARKUP.search(lowered, pos)) is not None:
        slash, name, closed, comment = found.groups()
        if comment:
            pos = _comment_end(lowered, found.end())
        elif name is None:  # `<!DOCTYPE`, `<![CDATA[`, `<?`, `</1`: a bogus comment up to `>`
            if foreign and lowered.startswith("<![cdata[", found.start()):
                close = lowered.find("]]>", found.end())
                pos = -1 if close < 0 else close + 3
            elif lowered.startswith("</>", found.start()):
                pos = found.end() + 1
            else:
                close = lowered.find(">", found.end())
                pos = -1 if close < 0 else close + 1
        else:
            pos, self_closing = (found.end(), False) if closed else _tag_end(lowered, found.end())
            if pos < 0:
                break
            if slash:
                if stack and stack[-1] == name:
                    foreign -= stack.pop() in _FOREIGN
                elif foreign:
                    raise HostileMarkup(f"</{name}> closing other elements inside SVG or MathML")
                continue
            if foreign:
                if name in _LEAVES_FOREIGN:
                    raise HostileMarkup(f"HTML <{name}> inside SVG or MathML")
                if self_closing:
                    continue
            elif name in _VOID or (self_closing and name in _FOREIGN):
                continue
            elif name == "plaintext":
                break  # the rest of the document is text
            elif name == "script" or name in _RAW_TEXT or name in _FOREIGN:
                if "select" in stack:  # html5ever ignores these there, and reads what follows as tags
                    raise HostileMarkup(f"<{name}> inside <select>")
                if name not in _FOREIGN:
                    pos = _raw_text_end(lowered, pos, name)
                    if pos < 0:
                        break
                    continue
            stack.append(name)
            foreign += name in _FOREIGN
            if len(stack) > deepest:
                deepest = len(stack)
                if deepest > limit:
                    raise HostileMarkup(f"HTML nested more than {limit} elements deep")
        if pos < 0:
            break
    return deepest


def _comment_end(html: str, start: int) -> int:
    """Where the comment whose text starts at `start` ends (after its closer); -1 when it runs to the end."""
    if html.startswith(">", start):
        return start + 1
    if html.startswith("->", start):
        return start + 2
    closer = _COMMENT_CLOSER.search(html, start)
    return -1 if closer is None else closer.end()


def _tag_end(html: str, pos: int) -> tuple[int, bool]:
    """After the `>` closing a tag whose attributes start at `pos`, and whether it ends in `/>`; -1 at EOF.

    The standard's attribute states: a name's first character may be anything (even `=` or a quote),
    values are double-quoted, single-quoted or run to whitespace or `>`; a `/` directly before `>` only
    counts outside a value.
    """
    while True:
        found = _NOT_SPACE_OR_SLASH.search(html, pos)
        if found is None:
            return -1, False
        run_start, pos = pos, found.start()
        if html[pos] == ">":
            return pos + 1, pos > run_start and html[pos - 1] == "/"
        found = _NAME_END.search(html, pos + 1)
        if found is None:
            return -1, False
        found = _NOT_SPACE.search(html, found.start())
        if found is None:
            return -1, False
        pos = found.start()
        if html[pos] != "=":
            continue
        found = _NOT_SPACE.search(html, pos + 1)
        if found is None:
            return -1, False
        pos = found.start()
        quote = html[pos]
        if quote in "\"'":
            close = html.find(quote, pos + 1)
            if close < 0:
                return -1, False
            pos = close + 1
        elif quote != ">":
            found = _UNQUOTED_END.search(html, pos)
            if found is None:
                return -1, False
            pos = found.start()


def _raw_text_end(html: str, pos: int, name: str) -> int:
    """After the end tag closing raw text that starts at `pos`; -1 when the text runs to the end."""
    closer = "</" + name
    while (end := html.find(closer, pos)) >= 0:
        after = end + len(closer)
        if after < len(html) and html[after] in _END_TAG_FOLLOWS:
            if name == "script" and "<!--" in html[pos:end]:
                raise HostileMarkup("a comment inside <script>")  # the standard's escape states decide then
            return _tag_end(html, after)[0]
        pos = after
    return -1
