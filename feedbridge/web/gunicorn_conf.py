"""Gunicorn settings shared by the Procfile and `feedbridge serve`, so local runs match production.

Threads rather than many processes: a feed request mostly waits on the forum, threads share one
in-process cache and one single-flight table, and memory stays at one copy per worker. The worker is
gunicorn's gthread with request headers read in the event loop (`feedbridge.web.worker`), so clients
that trickle their headers cost a buffer each, not a thread.
"""

import os

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "feedbridge.web.worker.HeaderBufferingWorker"
threads = int(os.environ.get("FEEDBRIDGE_THREADS", "8"))
# Longer than the upstream total timeout (20 s by default), so a slow forum gives a 504, not a killed worker.
timeout = int(os.environ.get("FEEDBRIDGE_WORKER_TIMEOUT", "40"))
graceful_timeout = 20
keepalive = 5
# feedbridge logs one line per request itself (with cache hit/miss); gunicorn's own lines (boot, worker
# restarts, errors) go to stdout too ("-" would be stderr), so a PaaS log drain sees one stream.
accesslog = None
errorlog = "/dev/stdout"
loglevel = os.environ.get("FEEDBRIDGE_LOG_LEVEL", "info").lower()
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
