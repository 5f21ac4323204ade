"""The fetcher's transport (`feedbridge/upstream/transport.py`): every answer ends at its deadline, over plain
HTTP and TLS, and a kept-alive connection gives each request a deadline of its own. Over real sockets, against
small servers here that count their connections (the fake forum's faults cover the same bound through the
whole service: tests/test_faults.py)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from feedbridge.config import Settings, parse_forum
from feedbridge.errors import UpstreamTimeout
from feedbridge.upstream import transport
from feedbridge.upstream.fetcher import Fetcher

LIST = b"# Latest topics\n\n"
TIMEOUTS = {"total_timeout": 1.0, "read_timeout": 2.0, "connect_timeout": 2.0, "retries": 0}
Answer = Callable[[socket.socket], None]


def _ok(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/markdown; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(LIST), LIST))


def _dribbled(conn: socket.socket) -> None:
    """The status line and headers a byte every 0.2 s (40 s in all): each within the read timeout."""
    for byte in b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 200 + b"\r\nContent-Length: 0\r\n\r\n":
        conn.sendall(bytes([byte]))
        time.sleep(0.2)


class Server:
    """HTTP/1.1 on 127.0.0.1, TLS when given a context: each request on a connection answered by `answer`; the
    connections it accepted and the header bytes it sent are counted."""

    def __init__(self, answer: Answer, tls: ssl.SSLContext | None = None):
        self.answer, self.tls = answer, tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            reader = conn.makefile("rb")
            while (line := reader.readline()) not in (b"", b"\r\n"):
                if line.startswith(b"GET"):
                    while reader.readline() not in (b"", b"\r\n"):
                        pass
                    self.answer(conn)
        except OSError:  # the client hung up, as it should past the deadline
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.listener.close()


@contextmanager
def serving(answer: Answer, tls: ssl.SSLContext | None = None) -> Iterator[Server]:
    server = Server(answer, tls)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return folder / "cert.pem", folder / "key.pem"


@pytest.fixture
def trusting(certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[ssl.SSLContext]:
    """The process's TLS roots are the certificate (SSL_CERT_FILE, which httpx's context honours), and the
    server's context serves it; the shared context is made again after, from the usual roots."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    transport._tls.cache_clear()
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(*certificate)
    try:
        yield served
    finally:
        transport._tls.cache_clear()


def fetch(server: Server) -> tuple[str, float]:
    forum = parse_forum(server.url)
    fetcher = Fetcher(replace(Settings(), forums=(forum,), **TIMEOUTS))
    started = time.monotonic()
    try:
        return fetcher.get(forum, server.url + "/latest.md").text, time.monotonic() - started
    finally:
        fetcher.close()


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_an_answer_is_read_over_plain_http_and_tls(trusting: ssl.SSLContext, tls: bool) -> None:
    with serving(_ok, trusting if tls else None) as server:
        assert fetch(server)[0] == LIST.decode()


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_headers_dribbled_within_the_read_timeout_end_at_the_total_timeout(trusting: ssl.SSLContext,
                                                                           tls: bool) -> None:
    # 40 s of headers, each byte 0.2 s after the last (the read timeout is 2 s): the answer's deadline, 1 s
    # after the request was written, ends it, over TLS too (the stream the handshake gives is bounded as well).
    with serving(_dribbled, trusting if tls else None) as server:
        with pytest.raises(UpstreamTimeout, match="longer than 1s") as late:
            fetch(server)
    assert late.value.message.startswith("upstream took longer")


def test_a_kept_alive_connection_gives_each_request_a_deadline_of_its_own() -> None:
    # The second request is sent past the first's deadline, on the same connection: its own deadline runs
    # from when it was written.
    with serving(_ok) as server:
        forum = parse_forum(server.url)
        fetcher = Fetcher(replace(Settings(), forums=(forum,), **TIMEOUTS))
        try:
            for _ in range(2):
                assert fetcher.get(forum, server.url + "/latest.md").text == LIST.decode()
                time.sleep(1.3)
        finally:
            fetcher.close()
    assert server.connections == 1
