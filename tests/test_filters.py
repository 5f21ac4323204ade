import unicodedata
from datetime import UTC, datetime

import pytest

from feedbridge.errors import FilterError, QueryError
from feedbridge.feeds.select.filters import (
    MAX_AUTHORS,
    MAX_LIMIT,
    FeedFilter,
    html_to_text,
    make_filter,
    topic_text,
)
from feedbridge.feeds.select.query import parse_query
from feedbridge.models import Topic


def at(day: int) -> datetime:
    return datetime(2026, 7, day, 12, 0, tzinfo=UTC)


def topic(
    id: int, title: str = "A topic", author: str | None = "alice", day: int | None = 1, **extra
) -> Topic:
    return Topic(
        id=id,
        title=title,
        url=f"https://forum.example/t/t/{id}",
        author=author,
        last_posted_at=None if day is None else at(day),
        **extra,
    )


def ids(topics) -> list[int]:
    return [t.id for t in topics]


# --- authors -------------------------------------------------------------------------------------


def test_author_filter_is_case_insensitive_and_tolerates_at_sign():
    topics = [topic(1, author="Alice"), topic(2, author="bob"), topic(3, author="ALICE")]
    assert ids(make_filter(authors=["@aLiCe"]).apply(topics)) == [1, 3]
    assert ids(make_filter(authors=["alice", "BOB"]).apply(topics)) == [1, 2, 3]


def test_unicode_usernames_match_lower_cased():
    topics = [topic(1, author="Jöran"), topic(2, author="STRASSE"), topic(3, author="joran")]
    assert ids(make_filter(authors=["JÖRAN"]).apply(topics)) == [1]
    assert ids(make_filter(authors=["Strasse"]).apply(topics)) == [2]
    assert ids(make_filter(authors=["straße"]).apply(topics)) == []  # another user on core


def test_topics_without_author_never_match_an_author_filter():
    topics = [topic(1, author=None), topic(2, author="alice")]
    assert ids(make_filter(authors=["alice"]).apply(topics)) == [2]
    assert ids(make_filter().apply(topics)) == [1, 2]


def test_a_single_string_is_one_author_not_its_letters():
    assert make_filter(authors="@Bob").authors == frozenset({"bob"})


@pytest.mark.parametrize("bad", ["", "@", "a b", "bob!", "x/y", "é" * 61, "<script>"])
def test_invalid_usernames_are_named_in_the_error(bad):
    with pytest.raises(FilterError) as error:
        make_filter(authors=["alice", bad])
    assert repr(bad) in str(error.value)
    assert "not a valid username" in str(error.value)


def test_valid_unusual_usernames_are_accepted():
    names = ["a_b.c-d", "हिन्दी", "José", "x" * 60, "  @Spaced  "]
    expected = {"a_b.c-d", "हिन्दी", "josé", "x" * 60, "spaced"}
    assert make_filter(authors=names).authors == expected


def test_author_count_limit_counts_distinct_names():
    make_filter(authors=[f"user{i}" for i in range(MAX_AUTHORS)] + ["USER0"])
    with pytest.raises(FilterError, match=f"{MAX_AUTHORS + 1} authors given; at most {MAX_AUTHORS}"):
        make_filter(authors=[f"user{i}" for i in range(MAX_AUTHORS + 1)])


# --- tags ----------------------------------------------------------------------------------------


def test_tag_filter_matches_any_tag_case_insensitively():
    topics = [topic(1, tags=("Inductor",)), topic(2, tags=("dynamo", "export")), topic(3)]
    assert ids(make_filter(tags=["inductor"]).apply(topics)) == [1]
    assert ids(make_filter(tags=["EXPORT", "inductor"]).apply(topics)) == [1, 2]


def test_invalid_tag_is_named_in_the_error():
    with pytest.raises(FilterError, match="'a b' is not a valid tag"):
        make_filter(tags=["ok", "a b"])


# --- query ---------------------------------------------------------------------------------------


def test_query_matches_title_and_excerpt():
    topics = [
        topic(1, title="Triton kernels"),
        topic(2, title="Meeting", excerpt="about CUDA graphs"),
        topic(3, title="Unrelated"),
    ]
    assert ids(make_filter(query="triton OR cuda").apply(topics)) == [1, 2]


def test_query_matches_full_content_text():
    html = "<p>We use <code>torch.compile</code> &amp; Café</p>"
    with_content = topic(1, title="Design", content_html=html)
    assert ids(make_filter(query="torch.compile cafe").apply([with_content, topic(2)])) == [1]


def test_blank_query_means_no_query_but_bad_query_raises():
    assert make_filter(query="  ").query is None
    with pytest.raises(QueryError, match="OR at the end"):
        make_filter(query="gpu OR")


def test_topic_text_includes_content_only_when_present():
    assert topic_text(topic(1, title="T", excerpt="E")) == "T\nE"
    assert topic_text(topic(1, title="T")) == "T\n"
    text = topic_text(topic(1, title="T", excerpt="E", content_html="<p>one</p><p>two &lt;3</p>"))
    assert text.startswith("T\nE\n")
    assert "one two <3" in text


def test_html_to_text_separates_blocks_and_decodes_entities():
    assert html_to_text("<p>alpha</p><p>beta &amp; gamma</p>") == "alpha beta & gamma"
    assert parse_query('"alpha beta"').matches(html_to_text("<p>alpha</p><p>beta</p>"))


# --- de-duplication, ordering, limit -------------------------------------------------------------


def test_duplicates_keep_the_copy_of_latest_activity():
    """A topic bumped between the reads of two pages is on both: the first sighting was kept, an older copy
    when the later page was read after the bump (the feed then showed it at its old date and place)."""
    first = topic(7, title="First sighting", day=3)
    again = topic(7, title="Bumped copy", day=9)
    result = FeedFilter().apply([first, topic(8, day=5), again])
    assert ids(result) == [7, 8]
    assert result[0].title == "Bumped copy"
    assert FeedFilter().apply([again, topic(8, day=5), first])[0].title == "Bumped copy"


def test_newest_first_undated_last_and_ties_stable():
    topics = [
        topic(1, day=None),
        topic(2, day=2),
        topic(3, day=5),
        topic(4, day=None),
        topic(5, day=2),
    ]
    assert ids(FeedFilter().apply(topics)) == [3, 2, 5, 1, 4]


def test_limit_applies_after_filtering_and_ordering():
    topics = [topic(i, author="bob" if i % 2 else "alice", day=i) for i in range(1, 11)]
    assert ids(make_filter(authors=["bob"], limit=3).apply(topics)) == [9, 7, 5]
    assert ids(make_filter(limit=MAX_LIMIT).apply(topics)) == list(range(10, 0, -1))


@pytest.mark.parametrize("bad", [0, -1, MAX_LIMIT + 1, True, 2.5, "5"])
def test_invalid_limit(bad):
    with pytest.raises(FilterError) as error:
        make_filter(limit=bad)
    assert f"limit {bad!r} is not a whole number from 1 to {MAX_LIMIT}" == str(error.value)


def test_apply_accepts_any_iterable_and_does_not_mutate_input():
    topics = (topic(1, day=1), topic(2, day=2))
    assert ids(FeedFilter().apply(iter(topics))) == [2, 1]
    assert ids(topics) == [1, 2]


# --- describe ------------------------------------------------------------------------------------


def test_describe():
    assert make_filter().describe() == ""
    assert make_filter(limit=5).describe() == ""
    both = make_filter(authors=["Bob", "@alice"], query="GPU OR cuda")
    assert both.describe() == "author: alice, bob · q: gpu OR cuda"
    assert make_filter(tags=["Inductor"], query="-weekly").describe() == "tag: inductor · q: -weekly"


def test_tags_match_however_their_letters_are_composed() -> None:
    """A tag typed decomposed (`u` and a combining diaeresis, as some keyboards and URLs give it) matched
    nothing, and `exclude_tag=` excluded nothing, where `author=` was normalised (NFC) already."""
    composed, decomposed = "über", unicodedata.normalize("NFD", "über")
    assert composed != decomposed
    topic = Topic(id=1, title="t", url="https://f.example/t/t/1", tags=(composed,))
    assert make_filter(tags=[decomposed]).keeps(topic)
    assert not make_filter(exclude_tags=[decomposed]).keeps(topic)
    assert make_filter(tags=[composed.upper()]).keeps(Topic(id=2, title="t", url="https://f.example/t/t/2",
                                                            tags=(decomposed,)))


def test_authors_are_told_apart_as_core_tells_usernames_apart():
    """Core normalises a username (`User.normalize_username`: NFC, then lower case), never casefolds it: `Straße` and
    `strasse` are two users, and `author=strasse` kept both, `exclude_author=strasse` dropped both."""
    import unicodedata

    from feedbridge.models import Topic

    straße, strasse = (Topic(n, f"T{n}", f"https://f.example/t/{n}", author=name)
                       for n, name in ((1, "Straße"), (2, "strasse")))
    assert make_filter(authors=["strasse"]).apply([straße, strasse]) == [strasse]
    assert make_filter(exclude_authors=["strasse"]).apply([straße, strasse]) == [straße]
    assert make_filter(authors=["STRASSE"]).apply([straße, strasse]) == [strasse]  # case is still no matter
    assert make_filter(authors=[unicodedata.normalize("NFD", "Zoë")]).apply(
        [Topic(3, "T", "https://f.example/t/3", author="zoë")])  # nor is normalisation
