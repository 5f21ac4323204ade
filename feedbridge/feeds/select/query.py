"""A small keyword query language for per-keyword feeds, matched against topic titles and excerpts.

Syntax (one line, at most `MAX_QUERY_LENGTH` characters and `MAX_TERMS` terms):

- ``gpu triton``: every term must match (implicit AND).
- ``"flex attention"``: a phrase, its words consecutive. An unbalanced quote runs to the end of the
  query (lenient: a feed URL cut short should still work, not fail).
- ``-weekly``, ``-"weekly sync"``: the topic must not match this term.
- ``triton OR cuda``: alternatives. ``OR`` is an operator only in upper case and unquoted; ``or`` is a
  plain word. OR binds tighter than the implicit AND, as in web search engines:
  ``gpu triton OR cuda`` means gpu AND (triton OR cuda). An exclusion cannot be one side of an OR
  (``-a OR b`` has no reading that users agree on); write ``-a -b`` to exclude both.
- A query made only of exclusions is allowed and matches every topic except those: combined with an
  author or category feed, "everything but the weekly sync" is a feed people want.

Matching is case- and accent-insensitive: text and terms are normalised the same way (NFKD, casefold,
NFKD again, then every combining mark is dropped), so "Café" matches "cafe", "STRASSE" matches "straße"
and "ﬁle" matches "file". Dropping all marks also drops the vowel signs of Indic and similar scripts,
so there matching ignores vowel signs and can over-match; one rule for every script keeps it simple.
The normalised text is split into words: runs of letters and digits, followed by any ``+`` or ``#``
so that ``c++`` and ``c#`` are words of their own rather than ``c``. Everything else, including
``_ . - /``, separates words.

A term matches a whole word or the start of one (``compile`` matches "compiled"; ``art`` does not match
"start"). A term whose text splits into several words is a phrase: ``torch.compile`` is the phrase
"torch compile" and matches "torch.compile", "torch compile" and "torch_compile". A phrase matches a
run of consecutive words, all whole words except the last, which may be a prefix (so a phrase can end
in a truncated excerpt's "Pr…"). Terms with no letters or digits at all (``&``, a lone ``-``) are
ignored, like punctuation in web search. Scripts written without spaces (Chinese, Japanese) are
matched only at the word starts that spaces or punctuation give them.

Matching is a plain substring search of each term in the text's words joined by single spaces (its
`haystack`): no regular expression runs on a term, and CPython's substring search switches to the linear
two-way algorithm on long texts, so no input (a 1 MB first post included) can make it backtrack. The
haystack is most of a match's cost and does not depend on the query, so a caller that matches the same
text against many queries (every `q=` variant of a feed) keeps it (`feeds.select.filters.topic_haystack`) and
asks `Query.found_in`.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from dataclasses import dataclass

from feedbridge.errors import QueryError
from feedbridge.render.turns import take_turn

MAX_QUERY_LENGTH = 500
MAX_TERMS = 32

OR = "OR"

# A bare term runs to whitespace or a quote; `"?` makes an unclosed phrase run to the end.
_TOKEN = re.compile(r'(-?)(?:"([^"]*)"?|([^\s"]+))')


_WORD = re.compile(r"[^\W_]+[+#]*")


@functools.cache
def marks() -> dict[int, None]:
    """A `str.translate` table deleting every combining mark (category M), built on first use.

    `re` has no \\p{M}, and a regex class of ~2,400 marks is several times slower than translate.
    """
    return {code: None for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code))[0] == "M"}


def normalize(text: str) -> str:
    """Fold case, compatibility forms and accents; ASCII text (most titles) skips Unicode work."""
    if text.isascii():
        return text.lower()
    # NFKD first so compatibility characters (ℌ, ﬁ) are cased as what they stand for, and again
    # after casefold, which can yield composed characters.
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())
    return folded.translate(marks())


def words(text: str) -> list[str]:
    """The normalised words of `text`, as matching sees them."""
    return _WORD.findall(normalize(text))


HAYSTACK_PIECE = 512
"""Characters of text normalised between two turns (`take_turn`): NFKD expands some characters 18-fold
(U+FDFA), and 512 of those take about 3 ms to normalise and split (256 KiB of them took 0.5 s in one go);
256 KiB of prose costs the pieces about 2 ms more than one call."""
MAX_HAYSTACK_CHARS = 1 << 20
"""A haystack stops growing at the piece that passes this: a post's text is at most 256 KiB (the cooked
and Markdown caps of `render.sanitize`), which no real text expands fourfold, while 256 KiB of U+FDFA
would make 4.7 million characters, most of the haystack cache."""

# What continues a word the previous piece ended in: more of its letters and digits and then `+#`, or,
# once it has a `+` or `#`, only more of those (as `_WORD` would have read on).
_MORE_WORD = re.compile(r"[^\W_]*[+#]*")
_MORE_SUFFIX = re.compile(r"[+#]*")


def haystack(text: str) -> str:
    """The normalised words of `text` as `Query.found_in` searches them, at most about `MAX_HAYSTACK_CHARS`.

    Made a piece at a time, with a turn before each, and the same as `words` of the whole text: `normalize`
    of a text is the joint of its pieces' (NFKD reorders only combining marks, all of which it then drops,
    and casefolding is per character), and a word the end of a piece cuts is carried on into the next.
    """
    found: list[str] = []
    cut: list[str] = []  # the parts of the word the last piece ended in
    size = 0
    for start in range(0, len(text), HAYSTACK_PIECE):
        take_turn()
        piece = normalize(text[start:start + HAYSTACK_PIECE])
        if cut:
            more = (_MORE_SUFFIX if cut[-1][-1] in "+#" else _MORE_WORD).match(piece).end()  # type: ignore[union-attr]
            if more:
                cut.append(piece[:more])
            if more == len(piece):
                continue
            found.append("".join(cut))
            cut, piece = [], piece[more:]
        piece_words = _WORD.findall(piece)
        # The last word touches the piece's end exactly when the piece ends with it (after it, a letter
        # or digit would start a word of its own and a `+` or `#` would belong to it).
        if piece_words and piece.endswith(piece_words[-1]):
            cut = [piece_words.pop()]
        found.extend(piece_words)
        size += len(piece)
        if size > MAX_HAYSTACK_CHARS:
            break
    if cut:
        found.append("".join(cut))
    # A leading space lets " term" find a word start with a plain substring search.
    return " " + " ".join(found)


@dataclass(frozen=True, slots=True)
class Term:
    """A word or a phrase, already normalised and split into words (never empty)."""

    words: tuple[str, ...]

    @property
    def needle(self) -> str:
        # Whole words but the last, which may be a prefix: " a b c" in " a b cd e" but not " xa b c".
        return " " + " ".join(self.words)

    def __str__(self) -> str:
        text = " ".join(self.words)
        return text if len(self.words) == 1 else f'"{text}"'


@dataclass(frozen=True, slots=True)
class Query:
    """All of `required` (each an OR of terms) must match and none of `excluded` may."""

    required: tuple[tuple[Term, ...], ...]
    excluded: tuple[Term, ...] = ()

    def matches(self, text: str) -> bool:
        return self.found_in(haystack(text))

    def found_in(self, words: str) -> bool:
        """`matches` for text already made into its `haystack`."""
        return all(any(term.needle in words for term in group) for group in self.required) and not any(
            term.needle in words for term in self.excluded
        )

    def describe(self) -> str:
        """Canonical form for feed titles: normalised words, single spaces, exclusions last.

        It parses back to an equal Query, so it can also serve as a cache key.
        """
        parts = [" OR ".join(map(str, group)) for group in self.required]
        parts += [f"-{term}" for term in self.excluded]
        return " ".join(parts)

    def __str__(self) -> str:
        return self.describe()


def _tokens(text: str) -> list[str | tuple[bool, Term, str]]:
    """OR markers and (excluded, term, source text) triples; terms without words are left out."""
    tokens: list[str | tuple[bool, Term, str]] = []
    for match in _TOKEN.finditer(text):
        minus, phrase, bare = match.groups()
        if bare == OR and not minus:
            tokens.append(OR)
            continue
        term_words = tuple(words(bare if phrase is None else phrase))
        if term_words:
            tokens.append((bool(minus), Term(term_words), match.group(0)))
    return tokens


def parse_query(text: str) -> Query:
    """Parse the query language described in the module docstring; QueryError says what is wrong."""
    if len(text) > MAX_QUERY_LENGTH:
        raise QueryError(f"query is {len(text)} characters long; the limit is {MAX_QUERY_LENGTH}")
    if not text.strip():
        raise QueryError("query is empty")
    tokens = _tokens(text)
    terms = sum(token is not OR for token in tokens)
    if terms == 0:
        raise QueryError(f"query {text.strip()!r} has no words to match (only punctuation or operators)")
    if terms > MAX_TERMS:
        raise QueryError(f"query has {terms} terms; the limit is {MAX_TERMS}")

    required: list[list[Term]] = []
    excluded: list[Term] = []
    for index, token in enumerate(tokens):
        if token is OR:
            if index == 0:
                raise QueryError("OR at the start of the query has nothing before it")
            if index == len(tokens) - 1:
                raise QueryError("OR at the end of the query has nothing after it")
            if tokens[index + 1] is OR:
                raise QueryError("OR OR: two ORs in a row need a term between them")
            for side in (tokens[index - 1], tokens[index + 1]):
                if isinstance(side, tuple) and side[0]:
                    raise QueryError(
                        f"the exclusion {side[2]} cannot be one side of an OR; write -a -b to exclude both"
                    )
            continue
        assert not isinstance(token, str)  # OR is the only string token
        is_excluded, term, _ = token
        if is_excluded:
            excluded.append(term)
        elif index > 0 and tokens[index - 1] is OR:
            required[-1].append(term)
        else:
            required.append([term])
    return Query(tuple(map(tuple, required)), tuple(excluded))
