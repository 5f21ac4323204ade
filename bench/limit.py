"""The limit for a cached hit (target 1): a bare WSGI callable, no framework, answering fixed bytes under the
same gunicorn settings as feedbridge. Nothing a Python web app can do costs less per request than this:
what remains is gunicorn's own parsing, threads and socket writes."""

import os
from pathlib import Path

from feedbridge.render.formats import FORMATS

BODY = Path(os.environ["BENCH_BODY_FILE"]).read_bytes()
HEADERS = [("Content-Type", FORMATS["atom"].media_type), ("Content-Length", str(len(BODY)))]


def app(environ: dict, start_response) -> list[bytes]:
    start_response("200 OK", HEADERS)
    return [BODY]
