"""Gunicorn settings shared by the Procfile and `feedbridge serve`, so local runs match production.

The worker is gunicorn's `gevent` worker with a send deadline, no request bodies and one header cap
(`feedbridge.web.worker`, which has the figures it was chosen by): a connection costs a greenlet and its
socket buffers, never a thread, so slow or absent clients cannot take the service's share from others.
Processes, not threads, spread the work over the cores; one process keeps one in-process cache and one
single-flight table for all its connections.

Without Redis nothing shares a budget's moving window between processes, so each worker spends 1/N of
every budget (`feedbridge.store.control.Windows`): `pre_fork` tells each worker its N.

With FEEDBRIDGE_METRICS=on every worker counts into prometheus_client's multiprocess files
(`feedbridge.metrics`): their directory is made fresh here, as the master reads this file, before anything
in the master imports prometheus_client (which picks its mode by PROMETHEUS_MULTIPROC_DIR on import: the
worker class's imports may reach it) and before any worker is forked; an operator's own value of the
variable is replaced, since files a past run left there would be counted again. `child_exit` marks a dead
worker's gauges gone (prometheus_client's documented hook), `on_exit` removes the directory.

With FEEDBRIDGE_LOG_FORMAT=json gunicorn's own lines are JSON objects like feedbridge's (`JsonLogger`).
Not through `logconfig_dict`: given a logging configuration, gunicorn turns its access log on, whose request
line would carry a signed feed URL's token and cost every request its formatting; feedbridge writes its own
request line (FEEDBRIDGE_ACCESS_LOG), tokens hidden.
"""

import logging
import math
import os
import shutil
import tempfile
from typing import Any

from gunicorn.glogging import Logger

from feedbridge.config import Settings
from feedbridge.web.logs import EscapeControls, JsonFormatter

# Bad values stop the server here, with the variable's name; all but a WEB_CONCURRENCY that is no integer,
# which gunicorn reads itself as it is imported, before this file, and reports in a traceback of its own.
_settings = Settings.from_env()
_metrics_dir = tempfile.mkdtemp(prefix="feedbridge-metrics-") if _settings.metrics else None
if _metrics_dir is not None:  # the name is feedbridge.metrics.MULTIPROC_DIR, which would import the library
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _metrics_dir

bind = f"0.0.0.0:{_settings.port}"
workers = _settings.web_concurrency
worker_class = "feedbridge.web.worker.Worker"
worker_connections = 1000
# Longer than the request deadline (FEEDBRIDGE_REQUEST_DEADLINE, checked against it): a slow forum gives an
# answer, not a killed worker.
timeout = _settings.worker_timeout
# On SIGTERM (a deploy, a restart) a request under way may take its whole deadline: it was cut at 20 s, of 25.
# Two seconds more to send the answer, within the 30 s a PaaS waits before it kills the process.
graceful_timeout = math.ceil(_settings.request_deadline) + 2  # whole seconds: gunicorn takes nothing else
# Also the deadline for a request's headers: the gevent worker reads each request under this timeout.
keepalive = 5
# A file response (Flask's static files: the feed stylesheet, the pages' script) goes out through the worker's
# `Sending` like every other response, within its deadline and seen by the shedding: gunicorn's sendfile()
# would write to the bare socket, blocking with no timeout, and a client that read nothing held it for good.
sendfile = False
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
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "").strip() or "127.0.0.1"  # blank is unset, as for all
# No runtime management socket: nothing may reconfigure a public instance, and instances on one machine
# would share its default path.
control_socket_disable = True


def pre_fork(server: Any, worker: Any) -> None:
    """Hand the worker about to be forked the instance's worker count (FEEDBRIDGE_WORKERS, read by its
    Settings): the arbiter's `num_workers` is the count it keeps, however it was set (WEB_CONCURRENCY,
    `--workers`, a TTIN/TTOU signal), where a `raw_env` line would carry only this file's `workers`."""
    os.environ["FEEDBRIDGE_WORKERS"] = str(server.num_workers)


def child_exit(server: Any, worker: Any) -> None:
    """In the master, once a worker has exited: its live gauges (the cache's size) no longer count."""
    if _metrics_dir is not None:
        from prometheus_client import multiprocess  # here: only once the variable above is set

        multiprocess.mark_process_dead(worker.pid, _metrics_dir)  # type: ignore[no-untyped-call]


def on_exit(server: Any) -> None:
    if _metrics_dir is not None:
        shutil.rmtree(_metrics_dir, ignore_errors=True)


class JsonLogger(Logger):
    """gunicorn's logger with its handlers' lines as JSON objects, escaped and with tokens hidden as
    feedbridge's are (`feedbridge.web.logs`); run again on every configuration reload, as gunicorn's is."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in (*self.error_log.handlers, *self.access_log.handlers):
            handler.setFormatter(JsonFormatter())
            if not any(isinstance(f, EscapeControls) for f in handler.filters):
                handler.addFilter(EscapeControls())


if _settings.log_format == "json":
    logger_class = JsonLogger


def post_fork(server: Any, worker: Any) -> None:
    """gunicorn's own lines (at DEBUG, each request's path) through the filter feedbridge's lines go through
    (`feedbridge.web.logs.EscapeControls`): a personal feed's path holds its member's token, and no line may."""
    for handler in logging.getLogger("gunicorn.error").handlers:
        if not any(isinstance(f, EscapeControls) for f in handler.filters):
            handler.addFilter(EscapeControls())
