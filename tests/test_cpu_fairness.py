"""CPU-bound work must not stall the gevent worker's event loop (issue #31, item 2).

The Procfile's gunicorn with ONE worker in front of the fake forum (JSON mode) serving a topic of 500 posts
of 20,000 characters (`tests/fake_heavy.py`). Its full feed is cached first, so what one client then asks for
(`q=` variants of it, its `.html` views, front page previews) sends nothing upstream: no budget or slot
applies, only the worker's CPU. Before the fix each such request held the event loop for 1–3 s and the cached
hits of that worker waited as long; now the loops that run per post take turns (`feedbridge.render.turns`),
what is the same for every variant is kept (haystacks, sanitized posts, rendered views and previews), and a
client's CPU is charged to its allowance (`feedbridge.web.allowance`).
"""

from __future__ import annotations

import gzip
import hashlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import pytest

from feedbridge.config import Settings
from feedbridge.feeds.admission.callers import CallerPool, ColdSlots, client_part
from feedbridge.feeds.admission.cpu import counting
from feedbridge.feeds.select import filters
from feedbridge.feeds.select.filters import make_filter, topic_haystack
from feedbridge.models import Topic
from feedbridge.render import sanitize, turns
from feedbridge.render.documents import render_atom, render_rss
from feedbridge.render.formats import gzipped
from feedbridge.render.json_feed import render_json
from feedbridge.render.meta import FeedMeta, topic_entry
from feedbridge.render.sanitize import sanitize_html
from feedbridge.web.allowance import UNIT, WINDOW, CpuAllowance, allowance
from feedbridge.web.app import create_app
from tests.appserver import procfile_web, settings_for
from tests.fake_heavy import HEAVY_POSTS, HEAVY_TOPIC, heavy_site
from tests.upstream import FakeForum

PROBES = 10
LATE = 1.0
"""Seconds within which a cached hit must answer, while the costly requests run."""
FULL = f"/t/{HEAVY_TOPIC}.atom?limit=500"
CACHED = "/t/9003.atom"  # a small post feed of the same forum, cached before the costly requests start


def narrow(n: int) -> str:
    """A new `q=` variant each `n` (`-zzN` excludes nothing): the posts numbered 1, 10–19 and 100–199 (each
    post names its number, `postN`), so every variant filters all 500 posts and renders 111 of them. Each is
    a few MB; one matching all 500 (13 MB) would push the probed feed out of the cache's probation segment
    between two probes."""
    return f"q=post1%20-zz{n}"


@dataclass
class Served:
    url: str  # the server
    key: str  # the forum's key in feed paths
    forum: FakeForum

    def feed(self, path: str) -> str:
        return f"{self.url}/{self.key}{path}"


@dataclass
class Costly:
    """One client sending costly requests back to back until `stop` is set: what it got."""

    served: Served
    stop: threading.Event = field(default_factory=threading.Event)
    statuses: list[tuple[str, int, str]] = field(default_factory=list)

    def run(self) -> None:
        with httpx.Client(timeout=60) as client:
            n = 0
            while not self.stop.is_set():
                n += 1
                # A new q= variant, a new .html view, the same .html view again, a new preview of the topic
                # (the newest 250 posts: five pages' window).
                kind, path = [
                    ("atom", f"/t/{HEAVY_TOPIC}.atom?limit=500&{narrow(n)}"),
                    ("html", f"/t/{HEAVY_TOPIC}.html?limit=500&{narrow(n)}"),
                    ("html again", f"/t/{HEAVY_TOPIC}.html?limit=500&{narrow(0)}"),
                    ("preview", None),
                ][n % 4]
                if path is None:
                    url = (f"{self.served.url}/preview?forum={self.served.key}&list=topic&topic={HEAVY_TOPIC}"
                           f"&q=post+-zx{n}&pages=5")
                else:
                    url = self.served.feed(path)
                response = client.get(url)
                self.statuses.append((kind, response.status_code, response.headers.get("x-feedbridge-cache", "-")))


@pytest.fixture(scope="module")
def heavy() -> Iterator[FakeForum]:
    with FakeForum(mode="json", posts=heavy_site().answer) as forum:
        yield forum


@pytest.fixture
def served(heavy: FakeForum, request: pytest.FixtureRequest) -> Iterator[Served]:
    """The Procfile's gunicorn, one worker, with the heavy topic's full feed and a small feed cached."""
    # Room in the cache for every variant a test makes: a copy that is only read (hits) stays in the store's
    # probation segment (feedbridge/store/memory.py promotes a copy stored again, not one read again), which
    # the variants' few MB each churn under the default 64 MiB; a probe then met a rebuild ('miss'), seen
    # in a fresh-clone run. The bound is not what these tests measure: test_abuse's flood test and bench row 6 do.
    env = {"FEEDBRIDGE_FORUMS": heavy.url, "WEB_CONCURRENCY": "1", "FEEDBRIDGE_LOG_LEVEL": "WARNING",
           "FEEDBRIDGE_CACHE_MAX_BYTES": str(1 << 30), **getattr(request, "param", {})}
    with procfile_web(env) as (url, _):
        served = Served(url, heavy.url.removeprefix("http://"), heavy)
        # From addresses of their own: building the full feed costs its client 1-2 s of its allowance.
        full = from_address("127.0.0.4", served.feed(FULL))
        assert full.status_code == 200 and full.text.count("<entry>") == HEAVY_POSTS
        # Read twice, as a reader polls it (the second read a hit), so the probes measure waiting, not a rebuild.
        assert [from_address("127.0.0.5", served.feed(CACHED)).status_code for _ in range(2)] == [200, 200]
        assert from_address("127.0.0.5", f"{url}/?forum={served.key}").status_code == 200  # the categories, read
        heavy.reset()
        yield served


def from_address(address: str, url: str) -> httpx.Response:
    """A GET from another loopback address: another client for the bridge."""
    with httpx.Client(timeout=60, transport=httpx.HTTPTransport(local_address=address)) as client:
        return client.get(url)


def probe(served: Served) -> list[float]:
    """`PROBES` fetches of the cached feed, each on a new connection, about every half second: how long each
    took (a timeout counts as 10 s)."""
    took = []
    for _ in range(PROBES):
        started = time.monotonic()
        try:
            response = httpx.get(served.feed(CACHED), timeout=10)
            assert response.status_code == 200 and response.headers["x-feedbridge-cache"] == "hit"
            took.append(time.monotonic() - started)
        except httpx.TimeoutException:
            took.append(10.0)
        time.sleep(max(0.0, 0.5 - (time.monotonic() - started)))
    return took


@pytest.mark.timeout(120)
@pytest.mark.parametrize("served", [{"FEEDBRIDGE_CPU_ALLOWANCE": "0"}], indirect=True)
def test_cached_hits_answer_within_a_second_while_one_client_sends_costly_requests_back_to_back(served):
    """The allowance is off: the turns and what is kept alone keep the hits answering. Before the fix, 8–10 of
    the 10 probes took longer than a second (the q= variants and .html views held the loop 1–3 s each)."""
    costly = Costly(served)
    sender = threading.Thread(target=costly.run, daemon=True)
    sender.start()
    try:
        time.sleep(1.0)  # the costly requests are under way
        took = probe(served)
    finally:
        costly.stop.set()
        sender.join(60)
    late = [round(t, 2) for t in took if t > LATE]
    assert len(late) <= 1, f"{len(late)} of {PROBES} cached hits took over {LATE:g} s: {late}"
    # The costly requests ran all along and were built (not answered from a cache), asking the forum nothing.
    built = [s for s in costly.statuses if s[0] == "atom"]
    assert len(costly.statuses) >= 8 and built and all(s[1:] == (200, "miss") for s in built), costly.statuses
    assert all(status == 200 for _, status, _ in costly.statuses), costly.statuses
    assert served.forum.count() == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("served", [{"FEEDBRIDGE_CPU_ALLOWANCE": "0.5"}], indirect=True)
def test_a_client_past_its_cpu_allowance_gets_429_while_hits_and_other_clients_are_served(served):
    """Half a second of CPU a minute: a client building variants of the long topic's feed is refused after a
    few, with a Retry-After, and so are its `.html` views and front pages (its previews say why); its cached
    hits, its conditional requests and another client's builds still answer; its previews are the front
    page's, refused too, with the reason where the result goes. (A reader polls the cached feed
    meanwhile, as readers do: it stays in the cache.)"""
    answers = []
    with httpx.Client(timeout=60, transport=httpx.HTTPTransport(local_address="127.0.0.2")) as greedy:
        for n in range(60):
            answers.append(greedy.get(served.feed(f"/t/{HEAVY_TOPIC}.atom?limit=500&{narrow(n)}")))
            assert httpx.get(served.feed(CACHED), timeout=10).headers["x-feedbridge-cache"] == "hit"
            if answers[-1].status_code == 429:
                break
        refused = answers[-1]
        hit = greedy.get(served.feed(CACHED))
        conditional = greedy.get(served.feed(CACHED), headers={"If-None-Match": hit.headers.get("etag", "-")})
        page = greedy.get(served.feed(f"/t/{HEAVY_TOPIC}.html?limit=500&{narrow(1000)}"))
        front = greedy.get(f"{served.url}/?forum={served.key}&list=topic&topic={HEAVY_TOPIC}&q=post+-zw")
        preview = greedy.get(f"{served.url}/preview?forum={served.key}&list=topic&topic={HEAVY_TOPIC}&q=post+-zw")
    theirs = from_address("127.0.0.3", served.feed(f"/t/{HEAVY_TOPIC}.atom?limit=500&{narrow(2000)}"))
    assert refused.status_code == 429, [a.status_code for a in answers]
    assert 2 <= len(answers) <= 50  # each variant filters 500 long posts and renders 111: 10-100 ms
    assert all(a.status_code == 200 and a.headers["x-feedbridge-cache"] == "miss" for a in answers[:-1])
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.text.count("\n") == 1 and "CPU" in refused.text and "retry in" in refused.text
    assert hit.status_code == 200 and hit.headers["x-feedbridge-cache"] == "hit"
    assert conditional.status_code == 304
    assert page.status_code == 429 and "retry-after" in page.headers and "CPU" in page.text
    assert front.status_code == 429 and "retry-after" in front.headers and "CPU" in front.text
    assert preview.status_code == 429 and "CPU" in preview.text and 'id="result-body"' in preview.text
    assert theirs.status_code == 200 and theirs.text.count("<entry>") == 111
    assert served.forum.count() == 0


WAIT = 6.0
"""Seconds the forum holds each of the waiting client's cold lists."""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("served", [{"FEEDBRIDGE_CPU_ALLOWANCE": "8"}], indirect=True)
def test_a_client_waiting_on_the_forum_is_charged_its_own_cpu_not_what_another_computed_meanwhile(served):
    """Issue 43, item 4. A client's four cold feeds (what one client may hold of a worker's six cold slots:
    `ColdSlots.per_client`) wait 6 s on the forum while another address builds variants
    of the long topic back to back, within its own 8 s allowance, on the same worker; then the waiting client
    asks for two variants of its own (built from what the bridge holds: the allowance applies). Each of them
    is answered: the four waits cost it their own milliseconds. Before, the CPU was `thread_time` across each
    request, every greenlet's: each wait was charged what the other computed meanwhile, once for each wait, and
    the waiting client's next views got 429."""
    costly = Costly(served)
    sender = threading.Thread(target=costly.run, daemon=True)
    served.forum.stall("/latest.json", WAIT, prefix=True)
    try:
        sender.start()
        time.sleep(0.5)  # the costly requests are under way
        with ThreadPoolExecutor(4) as waiting:
            cold = list(waiting.map(lambda n: from_address("127.0.0.6", served.feed(f"/latest.atom?category={n}")),
                                    range(1, 5)))
    finally:
        costly.stop.set()
        served.forum.clear()
        sender.join(60)
    after = [from_address("127.0.0.6", served.feed(f"/t/{HEAVY_TOPIC}.atom?limit=500&{narrow(3000 + n)}"))
             for n in range(2)]
    assert [(r.status_code, r.headers.get("x-feedbridge-cache")) for r in cold] == [(200, "miss")] * 4
    # The other address computed all along, within its allowance: built variants, never refused.
    assert sum(1 for s in costly.statuses if s[1:] == (200, "miss")) >= 8, costly.statuses
    assert all(status == 200 for _, status, _ in costly.statuses), costly.statuses
    assert [(r.status_code, r.headers.get("x-feedbridge-cache")) for r in after] == [(200, "miss")] * 2, \
        [(r.status_code, r.text[:120]) for r in after]


@pytest.mark.timeout(120)
def test_a_client_builds_a_few_at_once_however_many_it_sends_together(served):
    """The allowance is tested as a request starts and charged as it ends: 100 rebuilds of the long topic sent
    at once were all answered, 36 s of CPU charged as 20 and 2.5 GiB held together. Now a client has at most
    its part of the cold slots under way (each takes a few tenths of a second here; all twelve arrive within a
    few hundredths), the others are told to retry at once, and another client builds all the same."""
    BUILDS_AT_ONCE = client_part(Settings().cold_slots)  # noqa: N806 (a figure, named as the limit was)
    with ThreadPoolExecutor(12) as together:
        answers = list(together.map(
            lambda n: from_address("127.0.0.7", served.feed(f"/t/{HEAVY_TOPIC}.atom?limit=500&{narrow(6000 + n)}")),
            range(12)))
    statuses = sorted(a.status_code for a in answers)
    assert BUILDS_AT_ONCE < 6 and statuses.count(429) >= 6 and statuses.count(200) <= BUILDS_AT_ONCE + 1, statuses
    assert all("being built at once already" in a.text for a in answers if a.status_code == 429)
    other = from_address("127.0.0.8", served.feed(f"/t/{HEAVY_TOPIC}.atom?limit=500&{narrow(7000)}"))
    assert other.status_code == 200


@pytest.mark.timeout(120)
@pytest.mark.parametrize("served", [{"FEEDBRIDGE_CPU_ALLOWANCE": "0.5", "FEEDBRIDGE_TRUSTED_HOPS": "1"}],
                         indirect=True)
def test_behind_a_router_an_ipv6_client_rotating_addresses_within_its_64_has_one_cpu_allowance(served):
    """Issue 43, item 3. Behind a router, one /64 builds variants of the long topic, each from a new address of
    it: refused after a few, as one address is (the test above); another /64 still builds. Before, each
    address was a client with an allowance of its own: 60 variants, never a 429."""
    answers = []
    with httpx.Client(timeout=60) as router:
        for n in range(60):
            answers.append(router.get(served.feed(f"/t/{HEAVY_TOPIC}.atom?limit=500&{narrow(4000 + n)}"),
                                      headers={"X-Forwarded-For": f"2001:db8:64:1:{n:x}::{n + 1:x}"}))
            if answers[-1].status_code == 429:
                break
        theirs = router.get(served.feed(f"/t/{HEAVY_TOPIC}.atom?limit=500&{narrow(5000)}"),
                            headers={"X-Forwarded-For": "2001:db8:64:2::1"})
    refused = answers[-1]
    assert refused.status_code == 429 and "CPU" in refused.text, [a.status_code for a in answers]
    assert 2 <= len(answers) <= 50
    assert all(a.status_code == 200 and a.headers["x-feedbridge-cache"] == "miss" for a in answers[:-1])
    assert theirs.status_code == 200 and theirs.text.count("<entry>") == 111
    assert served.forum.count() == 0


# --- the parts, in process -------------------------------------------------------------------------------

def long_topics(count: int, tag: str) -> list[Topic]:
    """`count` topics with a first post of 16,000 characters; `tag` in their titles keeps them apart from
    other tests' in the process's caches."""
    return [Topic(id=n, title=f"Topic {n} {tag}", url=f"https://forum.example/t/t/{n}",
                  content_html=sanitize_html(f"<p>post{n} " + "inductor kernel " * 1000 + "</p>",
                                             "https://forum.example/t/1"))
            for n in range(count)]


def test_every_loop_over_entries_takes_a_turn_per_entry(monkeypatch):
    """With a turn due at every call, filtering, rendering and sanitizing 50 entries yield at least once per
    entry: counted, not timed."""
    pauses = []
    monkeypatch.setattr(turns, "TURN", 0.0)
    monkeypatch.setattr(turns.time, "sleep", pauses.append)
    topics = long_topics(50, "turns")
    meta = FeedMeta("t", "https://forum.example", "https://forum.example/latest", "https://forum.example/f")
    entries = [topic_entry(t, meta.forum_url) for t in topics]
    for work in (lambda: make_filter(query="post1 -nothing").apply(topics), lambda: render_atom(meta, entries),
                 lambda: render_rss(meta, entries), lambda: render_json(meta, entries),
                 lambda: [sanitize_html(f"<p>{n}</p>", "https://forum.example/t/2") for n in range(50)]):
        pauses.clear()
        work()
        assert len(pauses) >= 50 and set(pauses) == {turns.PAUSE}


def test_a_feed_is_gzipped_with_turns_between_slices(monkeypatch):
    """A feed's gzip is made as the feed is built, by the request building it: in one call, a 19 MB feed (500
    posts of the longest a hostile forum serves) held its worker 78 ms without a turn, every hit waiting, where a
    loop may compute `TURN` (5 ms). With a turn due at every call, 4 MiB of varied text yield at least 8 times:
    counted, not timed."""
    pauses = []
    monkeypatch.setattr(turns, "TURN", 0.0)
    monkeypatch.setattr(turns.time, "sleep", pauses.append)
    body = b"".join(f"<p>{hashlib.sha256(bytes([n % 256, n // 256])).hexdigest()} post {n}</p>".encode()
                    for n in range(60_000))[: 4 * 2**20]
    packed = gzipped(body)
    assert packed is not None and gzip.decompress(packed) == body and len(packed) < len(body) * 0.7
    assert packed == gzipped(body)  # the same body, the same bytes (an ETag of its own, shared by every worker)
    assert len(pauses) >= 8 and set(pauses) == {turns.PAUSE}


def test_what_every_query_reads_of_a_topic_is_made_once(monkeypatch):
    made = []
    real = filters.haystack
    monkeypatch.setattr(filters, "haystack", lambda text: made.append(text) or real(text))
    topics = long_topics(20, "haystacks")
    for query in ("post1", "kernel -post3", '"inductor kernel" OR nothing'):
        assert len(make_filter(query=query).apply(topics)) == {"post1": 11, "kernel -post3": 19}.get(query, 20)
    assert len(made) == 20  # one per topic, not one per topic and query
    edited = Topic(id=1, title="Topic 1", url="https://forum.example/t/t/1", content_html="<p>other words</p>")
    assert "other words" in topic_haystack(edited) and len(made) == 21  # another text, another haystack


def test_a_post_is_sanitized_once_per_base_url(monkeypatch):
    cleaned = []
    real = sanitize._sanitized_now
    monkeypatch.setattr(sanitize, "_sanitized_now", lambda html, base: cleaned.append(base) or real(html, base))
    post = '<p>a <a href="/t/x/1">link</a><script>alert(1)</script></p>'
    first = sanitize_html(post, "https://forum.example/t/a/1")
    assert sanitize_html(post, "https://forum.example/t/a/1") == first and len(cleaned) == 1
    other = sanitize_html(post, "https://other.example/t/a/1")
    assert len(cleaned) == 2 and "https://other.example/t/x/1" in other and "script" not in other


def burn(seconds: float) -> None:
    """Compute until this thread has run `seconds` more of CPU (the clock the meters read)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_what_a_requests_pool_work_computes_is_charged_to_it_and_what_other_threads_compute_is_not():
    """`feeds.admission.cpu.counting`: a pool job runs in a copy of its submitter's context (`CallerPool`), so what it
    computes counts for the request that submitted it, as the request's own work does; a thread outside
    computing meanwhile counts for nobody. Before, a thread's `thread_time` missed the pool's work."""
    pool = CallerPool(max_workers=2)
    outside = threading.Thread(target=burn, args=(0.3,))
    try:
        with counting() as spent:
            outside.start()
            for job in [pool.submit(burn, 0.1) for _ in range(2)]:
                job.result()
            burn(0.05)
            outside.join()
            charged = spent()
    finally:
        pool.shutdown()
    assert 0.25 <= charged < 0.35


def test_the_allowance_counts_a_request_whole_even_past_what_was_left():
    """`limits` refuses a cost larger than the room left and counts nothing: the allowance counts up to the
    window's limit instead, so the most expensive request cannot go through for free."""
    allowance = CpuAllowance(1.0, 4)
    allowance.charge("a", 0.6)
    assert allowance.has_room("a")
    allowance.charge("a", 5.0)  # far past the 0.4 s left
    assert not allowance.has_room("a") and allowance.has_room("b")
    refusal = allowance.refusal("a")
    assert refusal.status == 429 and 1 <= (refusal.retry_after or 0) <= WINDOW and "1 s" in refusal.message
    with pytest.raises(type(refusal)):
        with allowance.spending("a", "x"):
            pass
    # Builds at once: each thing being built counts once, however many of the client's requests join it.
    from contextlib import ExitStack

    busy = CpuAllowance(60.0, 3)
    with ExitStack() as held:
        for n in range(3):
            held.enter_context(busy.spending("a", f"feed {n}"))
        for _ in range(10):
            held.enter_context(busy.spending("a", "feed 0"))  # joining one under way
        with pytest.raises(type(refusal), match="being built at once"):
            with busy.spending("a", "another"):
                pass
        with busy.spending("b", "another"):  # another client builds
            pass
    with busy.spending("a", "another"):  # they ended: room again
        pass
    assert busy._building == {}
    small = CpuAllowance(UNIT, 4)  # a request costs at least one unit
    small.charge("c", 0.0)
    assert not small.has_room("c")
    off = CpuAllowance(0, 4)
    off.charge("a", 100.0)
    assert off.has_room("a")


@pytest.mark.parametrize("slots", [1, 6, 12])
def test_a_client_builds_as_many_at_once_as_it_may_hold_cold_slots(slots):
    """One figure for both limits on a client's concurrent builds: its part of the cold slots
    (FEEDBRIDGE_COLD_SLOTS), which a private instance raises to let its one reader fetch more feeds together.
    The allowance had a constant of its own (4), so raising the slots left every fifth build refused."""
    app = create_app(settings_for("http://127.0.0.1:9", cold_slots=slots, cpu_allowance=30.0))
    with app.app_context():
        made = allowance()
    assert made.builds_at_once == ColdSlots(slots).per_client == client_part(slots)
    assert made.builds_at_once == {1: 1, 6: 4, 12: 8}[slots]
