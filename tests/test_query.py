import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedbridge.errors import QueryError, RequestError
from feedbridge.feeds.select import query
from feedbridge.feeds.select.query import (
    MAX_QUERY_LENGTH,
    MAX_TERMS,
    Query,
    Term,
    normalize,
    parse_query,
    words,
)


def matches(query: str, text: str) -> bool:
    return parse_query(query).matches(text)


# --- normalisation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("cafe", "Un CAFÉ crème"),
        ("Café", "cafe"),
        ("strasse", "Die Straße"),
        ("STRASSE", "straße"),
        ("straße", "STRASSE"),
        ("ober", "Öber-Mode"),
        ("file", "ﬁle handles"),  # U+FB01 ligature
        ("ﬁle", "FILE"),
        ("naive", "naïve"),
        ("h2o", "H₂O"),  # compatibility subscript
        ("istanbul", "İSTANBUL"),  # dotted capital I casefolds to i + combining dot
    ],
)
def test_case_accent_and_compatibility_insensitive(query, text):
    assert matches(query, text)


def test_normalize_is_idempotent_on_examples():
    for text in ["Straße", "ﬁ", "İ", "Café", "ℌello"]:
        assert normalize(normalize(text)) == normalize(text)
    assert normalize("ℌello Ǆ") == "hello dz"  # compatibility split, then the caron dropped


def test_words_split_on_punctuation_but_keep_plus_and_hash():
    expected = ["torch", "compile", "c++", "20", "c#", "my", "var", "a", "b"]
    assert words("torch.compile, C++20 & C# (my_var) a/b") == expected


# --- prefix rule and punctuation words -----------------------------------------------------------


def test_term_matches_whole_word_or_word_prefix_only():
    assert matches("compile", "Compiled graphs")
    assert matches("compile", "using torch.compile today")
    assert not matches("art", "start the engine")
    assert not matches("compiled", "compile")


def test_punctuated_term_is_a_phrase():
    query = parse_query("torch.compile")
    assert query.required == ((Term(("torch", "compile")),),)
    assert query.matches("torch.compile is great")
    assert query.matches("Torch compile")
    assert query.matches("torch_compile")
    assert not query.matches("torch and compile")
    assert not query.matches("compile torch")


def test_cpp_and_csharp_are_words_not_c():
    assert matches("c++", "Building C++20 modules")
    assert not matches("c++", "cuda kernels")
    assert not matches("c++", "C code")
    assert matches("c#", "C# bindings")
    assert not matches("c#", "C++ bindings")


# --- AND, OR, phrases, exclusions ----------------------------------------------------------------


def test_implicit_and():
    assert matches("gpu triton", "Triton kernels on the GPU")
    assert not matches("gpu triton", "GPU memory")


def test_or_binds_tighter_than_and():
    query = parse_query("gpu triton OR cuda")
    assert query.required == ((Term(("gpu",)),), (Term(("triton",)), Term(("cuda",))))
    assert query.matches("gpu with cuda")
    assert query.matches("gpu with triton")
    assert not query.matches("cuda alone")  # would match if it were (gpu AND triton) OR cuda
    assert not query.matches("gpu alone")


def test_lowercase_or_is_a_word():
    assert matches("gpu or cuda", "gpu or cuda")
    assert not matches("gpu or cuda", "gpu cuda")


def test_phrase_matches_consecutive_words_last_as_prefix():
    assert matches('"flex attention"', "FlexAttention? No: Flex Attention kernels")
    assert matches('"flex attent"', "flex attention")
    assert not matches('"flex attention"', "attention flex")
    assert not matches('"flex attention"', "flex and attention")
    assert not matches('"lex attention"', "flex attention")  # first words must be whole
    assert not matches('"fle attention"', "flex attention")


def test_quoted_or_is_a_literal_word():
    assert matches('"OR"', "this or that")
    assert parse_query('a "OR" b').required == ((Term(("a",)),), (Term(("or",)),), (Term(("b",)),))


def test_exclusion_of_word_and_phrase():
    query = parse_query('dynamo -weekly -"sync notes"')
    assert query.matches("dynamo design")
    assert not query.matches("Dynamo weekly")
    assert not query.matches("dynamo sync notes")
    assert query.matches("dynamo notes sync")


def test_exclusion_only_matches_everything_else():
    query = parse_query("-weekly")
    assert query.required == ()
    assert query.matches("anything at all")
    assert query.matches("")
    assert not query.matches("Weekly sync")


def test_unbalanced_quote_runs_to_end():
    query = parse_query('gpu "flex attention')
    assert query.required == ((Term(("gpu",)),), (Term(("flex", "attention")),))


def test_punctuation_only_terms_are_ignored():
    assert parse_query("gpu & - cuda") == parse_query("gpu cuda")
    assert parse_query('gpu ""') == parse_query("gpu")


def test_double_minus_still_excludes():
    assert parse_query("gpu --weekly").excluded == (Term(("weekly",)),)


def test_hyphenated_word_is_a_phrase_not_an_exclusion():
    query = parse_query("zero-gc")
    assert query.excluded == ()
    assert query.matches("[RFC-0036] Zero-GC 64-Byte Cache-Aligned Flat Arena")


def test_matches_empty_text():
    assert not matches("gpu", "")


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "query is empty"),
        ("   \t", "query is empty"),
        ("&& !!", "has no words to match"),
        ("OR", "has no words to match"),
        ("OR gpu", "OR at the start of the query has nothing before it"),
        ("gpu OR", "OR at the end of the query has nothing after it"),
        ("gpu OR &", "OR at the end of the query has nothing after it"),
        ("gpu OR OR cuda", "two ORs in a row"),
        ("gpu OR -cuda", "the exclusion -cuda cannot be one side of an OR"),
        ('-"weekly sync" OR gpu', 'the exclusion -"weekly sync" cannot be one side of an OR'),
        ("x" * (MAX_QUERY_LENGTH + 1), f"query is {MAX_QUERY_LENGTH + 1} characters long; the limit is 500"),
        (" ".join(["w"] * (MAX_TERMS + 1)), f"query has {MAX_TERMS + 1} terms; the limit is 32"),
    ],
)
def test_invalid_queries(text, message):
    with pytest.raises(QueryError) as error:
        parse_query(text)
    assert message in str(error.value)
    assert isinstance(error.value, RequestError) and error.value.status == 400


def test_limits_are_inclusive():
    assert len(parse_query(" ".join(["w"] * MAX_TERMS)).required) == MAX_TERMS
    parse_query("x" * MAX_QUERY_LENGTH)


# --- canonical form ------------------------------------------------------------------------------


def test_describe_is_canonical():
    query = parse_query('  -Weekly   GPU  Triton OR "CUDA   Graphs" ')
    assert query.describe() == 'gpu triton OR "cuda graphs" -weekly'
    assert str(query) == query.describe()
    assert parse_query("Café torch.compile").describe() == 'cafe "torch compile"'
    assert parse_query(query.describe()) == query


# --- properties and robustness -------------------------------------------------------------------

query_alphabet = st.sampled_from(list('abcé ßﬁ"-+#._OR') + ["OR", " OR ", "İ", "\u0301", "\t"])


@settings(max_examples=300, deadline=None)
@given(
    query=st.one_of(st.text(max_size=80), st.lists(query_alphabet, max_size=40).map("".join)),
    text=st.text(max_size=200),
)
def test_parse_returns_query_or_query_error_and_matching_never_raises(query, text):
    try:
        parsed = parse_query(query)
    except QueryError:
        return
    assert isinstance(parsed, Query)
    assert isinstance(parsed.matches(text), bool)
    assert parse_query(parsed.describe()) == parsed


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=100))
def test_normalize_is_idempotent(text):
    assert normalize(normalize(text)) == normalize(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="abcéÉßSs ", min_size=1, max_size=6), min_size=1, max_size=4))
def test_text_matches_a_phrase_of_its_own_words(chunks):
    text = " ".join(chunks)
    text_words = words(text)
    if not text_words:
        return
    assert parse_query('"' + text.upper() + '"').matches(text)


@pytest.mark.timeout(10)
def test_pathological_megabyte_input_completes():
    # Worst cases for naive phrase search: a long run of one word and a long near-miss phrase.
    haystack = "a " * 500_000
    near_miss = parse_query('"' + "a " * 200 + 'b"')
    assert not near_miss.matches(haystack)
    assert near_miss.matches(haystack + "b")
    accented = "aé " * 350_000
    assert parse_query("ae -zzz").matches(accented)
    assert not parse_query("zzz").matches("東京大学 " * 250_000)


# --- the haystack of a long text ------------------------------------------------------------------


def test_a_haystack_of_text_nfkd_expands_is_bounded_and_made_between_turns(monkeypatch):
    """U+FDFA is 18 characters in NFKD: 256 KiB of it made a haystack of 4.7 million characters in one call
    of 0.5 s, no turn given to other requests."""
    turns = []
    monkeypatch.setattr(query, "take_turn", lambda: turns.append(1), raising=False)
    text = "\ufdfa" * 262_144
    made = query.haystack(text)
    assert len(made) <= 5 * len(text)
    assert len(turns) >= 100
    assert made.startswith(" " + " ".join(words("\ufdfa" * 3)[:-1]) + " ")  # its last word runs on


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab Z9_+#.-\n") + [
    "\u0301", "\u0345", "\u0327", "é", "ß", "ﬁ", "\ufdfa", "Σ", "İ", "한", "\u0f73", "\u0344", "ǅ", "①", "\u3000"]),
    max_size=40), st.integers(min_value=1, max_value=7))
def test_a_haystack_made_in_pieces_is_the_haystack_of_the_whole_text(text, piece):
    """Pieces cut words, marks from their letters and `+` from `c`: the haystack is still the whole text's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(query, "HAYSTACK_PIECE", piece)
        assert query.haystack(text) == " " + " ".join(words(text))
