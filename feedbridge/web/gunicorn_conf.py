"""Gunicorn settings shared by the Procfile and `feedbridge serve`, so local runs match production.

The worker is gunicorn's `gevent` worker with a send deadline, no request bodies and one header cap
(`feedbridge.web.worker`, which has the figures it was chosen by): a connection costs a greenlet and its
socket buffers, never a thread, so slow or absent clients cannot take the service's share from others.
Processes, not threads, spread the work over the cores; one process keeps one in-process cache and one
single-flight table for all its connections.

Without Redis nothing shares a budget's moving window between processes, so each worker spends 1/N of
every budget (`feedbridge.store.control.Windows`): `pre_fork` tells each worker its N.
"""

import logging
import os
from typing import Any

from feedbridge.config import Settings
from feedbridge.web.logs import EscapeControls

_settings = Settings.from_env()  # bad values stop the server here, with the variable's name

bind = f"0.0.0.0:{_settings.port}"
workers = _settings.web_concurrency
worker_class = "feedbridge.web.worker.Worker"
worker_connections = 1000
# Longer than the request deadline (FEEDBRIDGE_REQUEST_DEADLINE, checked against it): a slow forum gives an
# answer, not a killed worker.
timeout = _settings.worker_timeout
graceful_timeout = 20
# Also the deadline for a request's headers: the gevent worker reads each request under this timeout.
keepalive = 5
# Per line and per request, as gunicorn checks them. Until the blank line gunicorn buffers at most fields ×
# (size + 2) bytes (512 KiB) for at most `keepalive` seconds; the headers of a whole request are capped at
# 32 KiB by the worker.
limit_request_line = 4094
limit_request_fields = 64
limit_request_field_size = 8190
# No header may set SCRIPT_NAME or PATH_INFO: gunicorn answers 500 to a path outside a SCRIPT_NAME, and the
# service is mounted at the root.
forwarder_headers = ""
# feedbridge logs one line per request itself (with cache hit/miss); gunicorn's own lines (boot, worker
# restarts, errors) go to stdout too ("-" would be stderr), so a PaaS log drain sees one stream.
accesslog = None
errorlog = "/dev/stdout"
loglevel = _settings.log_level.lower()
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
# No runtime management socket: nothing may reconfigure a public instance, and instances on one machine
# would share its default path.
control_socket_disable = True


def pre_fork(server: Any, worker: Any) -> None:
    """Hand the worker about to be forked the instance's worker count (FEEDBRIDGE_WORKERS, read by its
    Settings): the arbiter's `num_workers` is the count it keeps, however it was set (WEB_CONCURRENCY,
    `--workers`, a TTIN/TTOU signal), where a `raw_env` line would carry only this file's `workers`."""
    os.environ["FEEDBRIDGE_WORKERS"] = str(server.num_workers)


def post_fork(server: Any, worker: Any) -> None:
    """gunicorn's own lines (at DEBUG, each request's path) through the filter feedbridge's lines go through
    (`feedbridge.web.logs.EscapeControls`): a personal feed's path holds its member's token, and no line may."""
    for handler in logging.getLogger("gunicorn.error").handlers:
        if not any(isinstance(f, EscapeControls) for f in handler.filters):
            handler.addFilter(EscapeControls())
