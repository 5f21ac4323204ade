"""The limit for a cached hit (target 1): a bare WSGI callable, no framework, answering fixed bytes under the
same gunicorn settings as feedbridge. Nothing a Python web app can do costs less per request than this:
what remains is gunicorn's own parsing, threads and socket writes.

With `BENCH_HEADERS_FILE` (a JSON list of name/value pairs, the headers of a real hit) it answers with those
headers too: gunicorn checks and formats every response header in Python, so the headers a feed must carry
(validators, caching, `Vary`, `nosniff`) are part of the limit for serving that feed.
"""

import json
import os
from pathlib import Path

from feedbridge.render.formats import FORMATS

BODY = Path(os.environ["BENCH_BODY_FILE"]).read_bytes()
_HEADERS_FILE = os.environ.get("BENCH_HEADERS_FILE")
HEADERS = ([(name, value) for name, value in json.loads(Path(_HEADERS_FILE).read_text(encoding="utf-8"))]
           if _HEADERS_FILE
           else [("Content-Type", FORMATS["atom"].media_type), ("Content-Length", str(len(BODY)))])


def app(environ: dict, start_response) -> list[bytes]:
    start_response("200 OK", HEADERS)
    return [BODY]
