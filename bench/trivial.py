"""The physical limit for target 1: a Flask route that returns fixed bytes, served under the same gunicorn
settings as feedbridge. Whatever feedbridge costs above this is ours."""

import os
from pathlib import Path

from flask import Flask, Response

from feedbridge.render.formats import FORMATS

BODY = Path(os.environ["BENCH_BODY_FILE"]).read_bytes()
app = Flask(__name__)


@app.get("/feed")
def feed() -> Response:
    return Response(BODY, content_type=FORMATS["atom"].media_type)
