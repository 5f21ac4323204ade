"""A forum topic that costs CPU to serve: `HEAVY_POSTS` posts of `POST_CHARS` characters of cooked HTML each
(Discourse's `max_post_length` is 32,000), built with `tests/fake_posts.py`'s `PostSite`, for the CPU
fairness test and bench section 9.

Each post is paragraphs of ordinary words with the markup core's cooker writes (`<p>`, `<a href>`,
`<code>`, `<strong>`), so the sanitizer, the keyword query and the renderers do their usual work on it:
nothing pathological, just long. The words cycle through `WORDS`, so a `q=` of any of them matches some
posts and a made-up word matches none; every post also names its own number (`postN`).
"""

from __future__ import annotations

from tests.fake_posts import USERS, PostSite

HEAVY_TOPIC = 7700
HEAVY_POSTS = 500
POST_CHARS = 20_000
WORDS = ("inductor", "dynamo", "graph", "kernel", "triton", "tensor", "export", "symbolic", "shape", "guard",
         "compile", "cache", "fusion", "buffer", "layout", "stride", "autograd", "backend", "lowering", "schedule")


def heavy_post(number: int) -> str:
    """About `POST_CHARS` characters of cooked HTML for post `number`."""
    paragraphs: list[str] = [f"<p>Post{number} opens the reply number {number}.</p>"]
    size, n = len(paragraphs[0]), number
    while size < POST_CHARS:
        words = [WORDS[(n + i * 7) % len(WORDS)] for i in range(40)]
        words[5] = f'<a href="/t/other/{n % 97}">{words[5]}</a>'
        words[11] = f"<code>{words[11]}_{n % 13}</code>"
        words[23] = f"<strong>{words[23]}</strong>"
        paragraph = "<p>" + " ".join(words) + ".</p>"
        paragraphs.append(paragraph)
        size += len(paragraph)
        n += 1
    return "\n".join(paragraphs)


def heavy_site() -> PostSite:
    """The standard site and topic `HEAVY_TOPIC`, `HEAVY_POSTS` posts of `POST_CHARS` characters each."""
    site = PostSite.standard()
    topic = site.topic(HEAVY_TOPIC, "A very long discussion of the compiler", "a-very-long-discussion", 5)
    names = list(USERS)
    for number in range(1, HEAVY_POSTS + 1):
        site.add(topic, names[number % len(names)], heavy_post(number))
    return site
