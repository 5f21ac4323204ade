"""Forums of one multisite Discourse host share one per-address budget (issue 45), on the Procfile's gunicorn.

Core's per-address limiters are global to a host (lib/middleware/request_tracker.rb: `RateLimiter.new(nil,
"global_ip_limit_10_#{ip}", ..., global: true)`), so the sites of a multisite cluster count the bridge's
requests to all of them in one 10 s and one 60 s window. Two fake forums here share one `CoreLimits`, as the
sites of one host share core's limiters. Unmarked, the bridge spends its budget on each of them and the host
refuses it (429, which stops every reader of both); marked with FEEDBRIDGE_MULTISITE, their budgets are one.
Only counts are asserted.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from bench.burst import Answer, burst, busiest
from tests.appserver import procfile_web
from tests.core_limits import CoreLimits
from tests.upstream import FakeForum, Request, list_reads


def run(marked: bool) -> tuple[dict[str, int], list[Answer], list[Request]]:
    """Both forums' feeds asked at once by hostile readers for 3 s; the host's refusals, the answers, and the
    requests both forums received."""
    host = CoreLimits(per_ip_10s=12, per_ip_minute=19)  # one host's limiters, both sites' requests counted
    with FakeForum(core_limits=host) as one, FakeForum(core_limits=host) as two:
        keys = [forum.url.removeprefix("http://") for forum in (one, two)]
        env = {"FEEDBRIDGE_FORUMS": f"markdown:{one.url} markdown:{two.url}", "WEB_CONCURRENCY": "2",
               "FEEDBRIDGE_TRUSTED_HOPS": "1", "FORWARDED_ALLOW_IPS": "127.0.0.1", "FEEDBRIDGE_LOG_LEVEL": "WARNING",
               "FEEDBRIDGE_FORUM_BUDGET_10S": "10", "FEEDBRIDGE_FORUM_BUDGET": "16",
               **({"FEEDBRIDGE_MULTISITE": ",".join(keys)} if marked else {})}
        answers: list[Answer] = []
        with procfile_web(env) as (url, _):
            threads = [threading.Thread(target=lambda k=key: answers.extend(burst([url], k, feeds=120, seconds=3)))
                       for key in keys]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        return host.refused, answers, one.requests + two.requests


@pytest.mark.timeout(90)
def test_forums_marked_as_one_multisite_host_share_one_budget_and_draw_no_429() -> None:
    refused, answers, sent = run(marked=True)
    assert refused == {}
    # One 10 s budget for both forums, split between the two workers, in any 10 s: a forum's first feed in a
    # worker also reads its basic info (its icon), and refused by the full window that later read waits for the
    # room (feeds/admission/gate.py), so its client, back after the window moved, asks on.
    assert 0 < busiest([r.time for r in sent]) <= 10
    lists = list_reads(sent)
    assert len(sent) - len(lists) <= 4  # the basic info: once per forum and worker at most
    statuses = Counter(a.status for a in answers)
    assert statuses[200] == len(lists) and statuses[503] > 0  # a cold feed's list each
    assert any("multisite host" in a.text for a in answers if a.status == 503)


@pytest.mark.timeout(90)
def test_unmarked_forums_of_one_host_each_spend_a_budget_and_the_host_refuses_the_bridge() -> None:
    """What the setting is for: each forum's own 10 s budget of 10, twice what the host allows the address."""
    refused, _answers, sent = run(marked=False)
    assert len(sent) > 12 and refused.get("ip_10_secs_limit", 0) > 0


def test_a_forum_at_the_root_of_a_host_never_reaches_into_another_configured_forums_subfolder():
    """Forum A at a host's root, forum B at its `/b`, each with its own key. A redirect of A's list into
    `/b/…` was followed, B's list served and kept as A's feed, and A's key sent to B's Discourse, which may be
    another party's: a URL under B's subfolder is B's alone (RELIABILITY.md row 66)."""
    from dataclasses import replace

    import httpx

    from feedbridge.config import Settings
    from feedbridge.feeds.request.signing import sign_url
    from tests.appserver import GENEROUS_BUDGETS, running_app

    with FakeForum() as forum:
        key = forum.url.removeprefix("http://")
        forum.set_body("/b/latest.md", httpx.get(f"{forum.url}/latest.md").text.replace("[", "[FORUM-B ", 5))
        forum.redirect("/latest.md", "/b/latest.md")
        settings = replace(Settings.from_env({
            "FEEDBRIDGE_FORUMS": f"markdown:{forum.url} markdown:{forum.url}/b", "FEEDBRIDGE_SECRET": "s" * 32,
            "FEEDBRIDGE_CREDENTIALS": f"{key}=user-api-key:AAAAKEYofFORUMa {key}/b=user-api-key:BBBBKEYofFORUMb",
        }), **GENEROUS_BUDGETS)
        with running_app(settings) as app:
            forum.reset()
            public = httpx.get(f"{app.url}/{key}/latest.atom", timeout=30)
            signed = httpx.get(app.url + sign_url(settings, f"/{key}/latest.atom"), timeout=30)
            own = httpx.get(f"{app.url}/{key}/b/latest.atom", timeout=30)  # B's feed is B's, as before
    assert public.status_code == signed.status_code == 502 and "another configured forum" in public.text
    assert "FORUM-B" not in public.text + signed.text and own.status_code == 200 and "FORUM-B" in own.text
    assert not [r for r in forum.requests if r.target.startswith("/b/") and r.headers.get("user-api-key") == "AAAAKEYofFORUMa"]


def test_a_wait_core_asks_of_the_bridges_address_holds_for_every_site_of_the_host():
    """Core's per-IP limiters count a whole multisite host: its 429 with `ip_10_secs_limit` to one site is a
    wait for all of them. Each other site was asked once more during it, a request certain to be refused,
    which core's aggressive limiters count against the bridge too (RELIABILITY.md row 71)."""
    from dataclasses import replace

    import httpx

    from feedbridge.config import Settings
    from tests.appserver import running_app

    host = CoreLimits(per_ip_10s=4, per_ip_minute=1000)  # an admin's limit below the bridge's budget
    with FakeForum(core_limits=host) as one, FakeForum(core_limits=host) as two:
        first, second = (forum.url.removeprefix("http://") for forum in (one, two))
        settings = replace(Settings.from_env({"FEEDBRIDGE_FORUMS": f"markdown:{one.url} markdown:{two.url}",
                                              "FEEDBRIDGE_MULTISITE": f"{first},{second}"}),
                           forum_budget_10s=1000, forum_budget=3000)
        with running_app(settings) as app:
            for feed in ("latest", "top", "hot", "c/compiler/5", "c/hardware/gpu/12", "tag/gpu/7"):
                httpx.get(f"{app.url}/{first}/{feed}.atom", timeout=30)
            assert host.refused["ip_10_secs_limit"] == 1  # the host asked the bridge's address to wait
            asked = len(two.requests)
            others = [httpx.get(f"{app.url}/{second}/{feed}.atom", timeout=30) for feed in ("latest", "top")]
    assert [answer.status_code for answer in others] == [503, 503] and "asked us to wait" in others[0].text
    assert len(two.requests) == asked and host.refused["ip_10_secs_limit"] == 1


@pytest.mark.parametrize("path", ["/b/latest.md", "/%62/latest.md", "/%2E%2e/b/latest.md", "/x/..//b/latest.md"])
def test_no_spelling_of_another_forums_subfolder_is_the_root_forums(path):
    """`/%62/` is `/b/` to a server (RFC 3986 §6.2.2.2; nginx decodes before it matches a location): the
    check read the encoded path, and a redirect there reached the subfolder's forum with the root's key."""
    from feedbridge.config import Forum
    from feedbridge.upstream.fetcher import is_within

    root, sub = Forum("https://h.example"), Forum("https://h.example/b")
    assert not is_within(root, "https://h.example" + path, (root, sub))
    assert is_within(sub, "https://h.example" + path, (root, sub))


def test_a_url_is_checked_against_the_configured_forums_without_splitting_their_urls_again(monkeypatch):
    """`is_within` split the base URL of every configured forum for each URL it checked, on every redirect hop
    and topic link: 7 µs with two forums, 0.6 ms with 200 (past urlsplit's own cache of 128). Each forum's
    origin and subfolder are split once, when the settings make it (RELIABILITY.md row 79): one URL's check
    splits that URL, whatever the number of forums, and says what it said."""
    from feedbridge.config import Forum
    from feedbridge.upstream import fetcher

    split = fetcher.urlsplit
    calls = Counter()
    monkeypatch.setattr(fetcher, "urlsplit", lambda url, *args: (calls.update([url]), split(url, *args))[1])
    for count in (2, 200):
        forums = (Forum("https://h.example"), *(Forum(f"https://h.example/s{i}") for i in range(count - 1)))
        calls.clear()
        answers = [fetcher.is_within(forum, url, forums) for forum in (forums[0], forums[1])
                   for url in ("https://h.example/t/x/1.json", "https://h.example/s0/latest.md", "https://H.example/s0",
                               "http://h.example/t/1", "https://h.example/s10/../s0/x")]
        assert answers == [True, False, False, False, False, False, True, True, False, True], count
        assert not any(forum.base_url in calls for forum in forums), calls
