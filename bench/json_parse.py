"""`python -m bench.json_parse`: the JSON list parser on a 30-topic page against decoding the text alone.

Decoding with msgspec, the decoder the parser uses, is the floor: the parser cannot be cheaper than
decoding the text, so the difference is the cost of reading topics out of the decoded page. `json.loads`
is printed beside it, for scale. The page is `fixtures/json/current-latest.json`, a full
first page in the current Discourse layout (~28 KB). Target: under 1 ms per page on this machine.
"""

from __future__ import annotations

import json

import msgspec

from feedbridge.discourse.json_pages import parse_json_listing

from .harness import PROJECT_ROOT, median_seconds_rounds

PAGE = PROJECT_ROOT / "fixtures" / "json" / "current-latest.json"
BASE = "https://forum.example.org"
TARGET_MS = 1.0


def json_parse_times(rounds: int = 15, number: int = 200) -> dict[str, float]:
    """Median seconds per page of `parse_json_listing`, msgspec and `json.loads` on the same text, sampled in
    alternating rounds so a neighbour's burst of load skews both alike."""
    text = PAGE.read_text(encoding="utf-8")
    assert len(parse_json_listing(text, base_url=BASE).topics) == 30
    return median_seconds_rounds({"parse_json_listing": (lambda: parse_json_listing(text, base_url=BASE), number),
                                  "msgspec": (lambda: msgspec.json.decode(text), number),
                                  "json.loads": (lambda: json.loads(text), number)}, rounds)


def main() -> None:
    times = json_parse_times()
    parse, floor = times["parse_json_listing"] * 1e3, times["msgspec"] * 1e3
    print(f"30-topic JSON page ({PAGE.stat().st_size} bytes):")
    verdict = "met" if parse < TARGET_MS else "MISSED"
    print(f"  parse_json_listing  {parse:.3f} ms/page  (target < {TARGET_MS:g} ms: {verdict})")
    print(f"  msgspec (floor)     {floor:.3f} ms/page")
    print(f"  json.loads          {times['json.loads'] * 1e3:.3f} ms/page")
    print(f"  topics on top of decoding: {parse - floor:.3f} ms/page ({parse / floor:.2f}x the floor)")


if __name__ == "__main__":
    main()
