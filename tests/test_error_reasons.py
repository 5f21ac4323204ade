"""What went wrong upstream travels as fields of the error (`reason`, `upstream_status`), set where it is
known (the fetcher), kept when the failure is remembered, and read by the page that says it in words:
no caller reads a message's text to learn what it means."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from lxml import html

from feedbridge import errors
from feedbridge.config import Settings, parse_forum
from feedbridge.errors import (
    Reason,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRateLimited,
    UpstreamRefused,
    UpstreamTimeout,
)
from feedbridge.feeds.service import build_service
from feedbridge.feeds.sources.dialects import MARKDOWN
from feedbridge.store.memory import MemoryStore
from feedbridge.upstream.fetcher import Fetcher
from feedbridge.web.app import create_app
from tests.upstream import FakeForum

LIST = "/latest.md"
FAST = {"read_timeout": 0.5, "total_timeout": 1.0, "connect_timeout": 1.0, "retries": 0}


def settings(forum: FakeForum, **overrides: object) -> Settings:
    return replace(Settings(forums=(parse_forum(f"markdown:{forum.url}"),)), **{**FAST, **overrides})


@pytest.mark.parametrize(("arm", "kind", "reason", "status"), [
    (lambda up: up.fail(LIST, 503), UpstreamError, Reason.ANSWERED, 503),
    (lambda up: up.fail(LIST, 410), UpstreamNotFound, Reason.NOT_FOUND, 410),
    (lambda up: up.fail(LIST, 403), UpstreamRefused, Reason.REFUSED, 403),
    (lambda up: up.rate_limit(LIST, 5), UpstreamRateLimited, Reason.RATE_LIMITED, 429),
    (lambda up: up.fail(LIST, 302), UpstreamError, Reason.REDIRECT, 302),  # no Location
    (lambda up: up.redirect(LIST, "https://elsewhere.example/latest.md"), UpstreamError, Reason.REDIRECT, None),
    (lambda up: up.close(LIST), UpstreamError, Reason.CONNECTION, None),
    (lambda up: up.stall(LIST, 3), UpstreamTimeout, Reason.TIMEOUT, None),
    (lambda up: up.huge(LIST, 2 << 20), UpstreamError, Reason.BODY, None),
    (lambda up: up.bad_utf8(LIST), UpstreamError, Reason.BODY, None),
], ids=["503", "410", "403", "429", "302 without Location", "redirect off the forum", "closed", "stalled",
        "too large", "not UTF-8"])
def test_the_fetcher_says_why_in_fields(upstream: FakeForum, arm: Callable[[FakeForum], None],
                                        kind: type[UpstreamError], reason: Reason, status: int | None) -> None:
    arm(upstream)
    # The short timeouts are the stalled case's; every other case is decided by what the forum sent, so a loaded
    # machine reading the megabyte of "too large" slowly must not turn it into a timeout (seen in CI).
    patience = {} if reason is Reason.TIMEOUT else {"read_timeout": 10.0, "total_timeout": 20.0}
    config = settings(upstream, max_body_bytes=1 << 20, **patience)
    fetcher = Fetcher(config)
    try:
        with pytest.raises(UpstreamError) as raised:
            fetcher.get(config.forums[0], upstream.url + LIST)
    finally:
        fetcher.close()
    assert type(raised.value) is kind
    assert (raised.value.reason, raised.value.upstream_status) == (reason, status)


def test_a_remembered_failure_keeps_its_reason_and_status(upstream: FakeForum) -> None:
    upstream.fail(LIST, 503)
    config = settings(upstream)
    service = build_service(config, MemoryStore(1 << 24), Fetcher(config))
    errors = []
    for _ in range(2):
        with pytest.raises(UpstreamError) as raised:
            service.page(config.forums[0], upstream.url + LIST, source=MARKDOWN)
        errors.append(raised.value)
    assert upstream.count(LIST) == 1  # the second answer is the remembered failure
    assert "remembered" in errors[1].message
    assert [(e.reason, e.upstream_status) for e in errors] == [(Reason.ANSWERED, 503)] * 2


def test_the_front_page_tells_the_bridges_own_budget_from_the_forum_asking_to_wait(upstream: FakeForum) -> None:
    """Both are rate limits (503); only the reason says whose."""
    app = create_app(settings(upstream, forum_budget=1))
    client = app.test_client()
    assert client.get("/").status_code == 200  # spends the one request of the minute

    said = html.fromstring(client.get("/?list=top").data).get_element_by_id("preview-unavailable").text_content()
    assert "feedbridge is reading" in said and "asked feedbridge to slow down" not in said


def _drawn_tree() -> dict[str, tuple[str, int | None]]:
    """The hierarchy `errors`' docstring draws: each class's parent and the status its row states, if any."""
    drawn: dict[str, tuple[str, int | None]] = {}
    line_of: list[str] = []  # the class named at each depth so far
    for line in (errors.__doc__ or "").splitlines():
        if "── " not in line and not line.strip().startswith("FeedbridgeError "):
            continue
        depth = line.index("── ") // 4 if "── " in line else 0
        name, *rest = line.split("── ")[-1].split()
        del line_of[depth:]
        line_of.append(name)
        if depth:
            drawn[name] = (line_of[depth - 1], int(rest[0]) if rest and rest[0].isdigit() else None)
    return drawn


def test_the_drawn_tree_is_the_class_tree() -> None:
    """The tree in `errors`' docstring is the classes' own: every class of it under its drawn parent, with
    the status its row says (or its parent's), and every error class drawn. So the bridge's own refusal
    (`BridgeBusy`) sits outside the forum's failures (`UpstreamError`), as drawn, where a handler of those
    cannot take it for one."""
    drawn = _drawn_tree()
    ours = {name for name, value in vars(errors).items()
            if isinstance(value, type) and issubclass(value, errors.FeedbridgeError) and value is not errors.FeedbridgeError}
    assert set(drawn) == ours
    for name, (parent, status) in drawn.items():
        cls = getattr(errors, name)
        assert cls.__bases__[0] is getattr(errors, parent), name
        assert cls.status == (status if status is not None else getattr(errors, parent).status), name
    assert not issubclass(errors.BridgeBusy, UpstreamError) and issubclass(errors.BridgeBusy, errors.NoForumAnswer)


def test_a_drawn_tree_that_is_not_the_class_tree_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(errors, "__doc__", (errors.__doc__ or "").replace(
        "    │   └── BridgeBusy ", "    │   │   └── BridgeBusy "))
    assert _drawn_tree()["BridgeBusy"][0] == "UpstreamError"
    with pytest.raises(AssertionError):
        test_the_drawn_tree_is_the_class_tree()
