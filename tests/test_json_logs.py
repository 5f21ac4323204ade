"""FEEDBRIDGE_LOG_FORMAT=json on the Procfile's gunicorn: every line it prints, gunicorn's and feedbridge's, is
one JSON object; a request's lines (its own and its upstream fetches') carry the id it is answered with;
what a client sends (an id of its own, a token, a control character) is never a line's or a field's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.appserver import ProcfileApp, procfile_app, settings_for
from tests.upstream import FakeForum, read_at

COMPILER = "/c/compiler/5.atom"
SECRET = "Sekr1tTokenValue"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ProcfileApp, FakeForum]]:
    with FakeForum() as forum, procfile_app(settings_for(forum.url, log_format="json", access_log=True,
                                                                   metrics=True)) as app:
        yield app, forum


def lines(app: ProcfileApp) -> list[dict[str, Any]]:
    """Every line the server printed, each read as one JSON object (a line that is not one fails the test)."""
    output = app.output()
    assert output.endswith("\n")
    return [json.loads(line) for line in output.splitlines()]


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, timeout=30, **kwargs)


def test_every_line_is_a_json_object_gunicorns_included(served):
    app, _forum = served
    assert get(app.feed_url("/latest.atom")).status_code == 200
    printed = lines(app)
    assert {"time", "level", "logger", "message", "pid"} <= set(printed[0])
    booted = [line for line in printed if line["logger"] == "gunicorn.error"]
    assert any(line["message"].startswith("Starting gunicorn") for line in booted), booted
    assert any(line["message"].startswith("Booting worker with pid: ") for line in booted), booted
    assert any(line["logger"] == "feedbridge.access" for line in printed)


def test_a_requests_upstream_fetches_carry_its_id_and_every_request_has_its_own(served):
    app, forum = served
    cold = get(app.feed_url(COMPILER), headers={"X-Request-ID": "mine-1234"})
    warm = get(app.feed_url(COMPILER))
    assert cold.status_code == warm.status_code == 200
    assert warm.headers["x-feedbridge-cache"] == "hit"
    cold_id, warm_id = cold.headers["x-request-id"], warm.headers["x-request-id"]
    assert cold_id != warm_id and "mine-1234" not in (cold_id, warm_id)  # made here, never taken from the client
    printed = lines(app)
    assert not any("mine-1234" in json.dumps(line) for line in printed)
    mine = [line for line in printed if line.get("request_id") == cold_id]
    fetched = [line for line in mine if line["logger"] == "feedbridge.upstream.fetcher"]
    assert [line["url"] for line in fetched][-1] == f"{forum.url}{read_at('/c/compiler/5')}"
    assert all(line["status"] == 200 and isinstance(line["ms"], float) for line in fetched)
    (access,) = [line for line in mine if line["logger"] == "feedbridge.access"]
    assert (access["method"], access["path"], access["status"], access["cache"]) == (
        "GET", f"/{app.forum_key}{COMPILER}", 200, "miss")
    (hit,) = [line for line in printed if line.get("request_id") == warm_id]  # a hit asks nothing upstream
    assert (hit["logger"], hit["cache"]) == ("feedbridge.access", "hit")


def test_every_answer_carries_a_request_id_a_scrape_of_metrics_too(served):
    app, _forum = served
    answers = [get(f"{app.url}/metrics"), get(f"{app.url}/metrics", headers={"X-Forwarded-For": "203.0.113.9"}),
               get(app.feed_url("/latest.atom")), get(f"{app.url}/healthz"), get(f"{app.url}/nowhere")]
    assert [answer.status_code for answer in answers] == [200, 200, 200, 200, 404]
    assert "feedbridge_feed_requests_total" in answers[0].text
    ids = [answer.headers.get("x-request-id") for answer in answers]
    assert all(ids) and len(set(ids)) == len(ids), ids


def test_no_token_and_no_control_character_reaches_a_line(served):
    app, _forum = served
    response = get(app.feed_url(f"{COMPILER}%0a%1b[2J%E2%80%A8?token={SECRET}&limit=5"))
    assert response.status_code == 404
    assert SECRET not in app.output()
    (line,) = [line for line in lines(app) if line.get("request_id") == response.headers["x-request-id"]]
    assert line["path"] == f"/{app.forum_key}/c/compiler/5.atom\\x0a\\x1b[2J\\u2028?token=…&limit=5"
    assert line["message"] == f"GET {line['path']} {response.status_code} {line['ms']:.1f}ms cache=-"
