"""Remote images (`server.fetch_images`): fetched from public addresses only, every URL
checked and connected to at the address checked, proxy variables ignored, one error for
every failure. Only loopback is ever reached: the gateways here either refuse it or allow
127.0.0.1 by `server.fetch_images_allow`."""

from __future__ import annotations

import contextlib
import gzip
import http.server
import io
import socket
import socketserver
import threading
import time
from ipaddress import ip_address, ip_network

import httpx
import pytest
from conftest import free_port, serving
from PIL import Image

from gateway.canonical.fetch import FetchFailed, fetch_image, is_public


def png() -> bytes:
    out = io.BytesIO()
    Image.new("L", (8, 8)).save(out, "PNG")
    return out.getvalue()


PNG = png()
# 50 KB on the wire, 50 MB decoded.
BOMB = gzip.compress(b"\0" * 50_000_000)


class Site(http.server.ThreadingHTTPServer):
    """An image server on 127.0.0.1 that remembers the requests it got."""

    daemon_threads = True

    def __init__(self):
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.drips_ended: list[float] = []  # when each /drip found its reader gone
        super().__init__(("127.0.0.1", 0), SiteHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"


class SiteHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the stdlib's name
        self.server.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        if self.path == "/a.png":
            self.send_response(200)
            self.send_header("content-length", str(len(PNG)))
            self.end_headers()
            self.wfile.write(PNG)
        elif self.path == "/bomb.png":  # compressed whatever the request asked for
            self.send_response(200)
            self.send_header("content-encoding", "gzip")
            self.send_header("content-length", str(len(BOMB)))
            self.end_headers()
            self.wfile.write(BOMB)
        elif self.path == "/drip.png":  # a byte every 0.2 s, for up to 30 s
            self.send_response(200)
            self.send_header("content-length", "1000")
            self.end_headers()
            try:
                for _ in range(150):
                    self.wfile.write(b"\0")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                self.server.drips_ended.append(time.monotonic())
        elif self.path.startswith("/to/"):
            self.send_response(302)
            self.send_header("location", self.path.removeprefix("/to/"))
            self.end_headers()
        else:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

    def log_message(self, *args):
        pass


class Garbage(socketserver.ThreadingTCPServer):
    """An open port that speaks no HTTP."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Garbage.Handler)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")


@contextlib.contextmanager
def running(server):
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site():
    with running(Site()) as server:
        yield server


@pytest.fixture(scope="module")
def proxy():
    """Where HTTP(S)_PROXY points the gateway that allows loopback: it must never be used."""
    with running(Site()) as server:
        yield server


CONFIG = """
server:
  fetch_images: true
  limits: {{max_body_bytes: 1MiB, fetch_timeout: {timeout}}}
  {allow}
models:
  - id: echo
    engine: scripted
"""


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    """Public addresses only, as every real deployment."""
    with serving(
        tmp_path_factory.mktemp("strict"), CONFIG.format(allow="", timeout="10s")
    ) as process:
        yield process


@pytest.fixture(scope="module")
def allowing(tmp_path_factory, proxy):
    """127.0.0.1 allowed deliberately, with proxy variables in the environment."""
    env = {name: proxy.url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy")}
    text = CONFIG.format(allow="fetch_images_allow: [127.0.0.1/32]", timeout="1s")
    with serving(tmp_path_factory.mktemp("allowing"), text, env=env) as process:
        yield process


def ask(gateway, *urls: str) -> httpx.Response:
    content = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    body = {"model": "echo", "messages": [{"role": "user", "content": content}]}
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30)


def error(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    return response.json()["error"]["message"]


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.0.0.1", "192.168.1.1", "172.16.0.1", "0.0.0.0", "100.64.0.1",
     "169.254.169.254", "224.0.0.1", "::1", "fe80::1", "fd00::1", "::ffff:127.0.0.1",
     "64:ff9b::a9fe:a9fe", "64:ff9b:1::1", "2002:7f00:1::1"],
)  # fmt: skip
def test_internal_addresses_are_not_public(address):
    assert not is_public(ip_address(address))


def test_public_addresses_and_the_allowed_are():
    assert is_public(ip_address("93.184.216.34")) and is_public(ip_address("2606:4700::1111"))
    loopback = [ip_network("127.0.0.1/32")]
    assert is_public(ip_address("127.0.0.1"), loopback)
    assert not is_public(ip_address("127.0.0.2"), loopback)


def test_the_first_url_is_checked_too(strict, site):
    # The client's own URL names a loopback server: refused before any connection.
    assert error(ask(strict, f"{site.url}/a.png")).endswith(": could not fetch image 1")
    assert site.requests == []
    failed = strict.wait_event("image_fetch_failed")
    assert "127.0.0.1 is 127.0.0.1, not a public address" in failed["reason"]


def test_every_failure_reads_the_same(allowing, site):
    with running(Garbage()) as garbage:
        urls = [
            f"http://127.0.0.1:{free_port()}/a.png",  # a closed port
            f"http://127.0.0.1:{garbage.server_address[1]}/a.png",  # open, not HTTP
            f"{site.url}/missing.png",  # HTTP 404
            f"{site.url}/to/http://169.254.169.254/latest/meta-data/",  # cloud metadata
            f"{site.url}/to/http://[::1]:{site.server_port}/a.png",  # loopback, not allowed
            f"{site.url}/to/file:///etc/passwd",
            "http://no-such-host.invalid/a.png",
        ]
        messages = {url: error(ask(allowing, url)) for url in urls}
    assert set(messages.values()) == {"$.messages[0].content[0].image_url: could not fetch image 1"}
    # The second image of a request is named as such.
    assert error(ask(allowing, f"{site.url}/a.png", urls[0])).endswith("could not fetch image 2")


def test_an_allowed_address_is_fetched_without_the_proxy(allowing, site, proxy):
    site.requests.clear()
    # Fetched and readable: the text-only model is the one refusing it.
    assert "reads text only" in error(ask(allowing, f"{site.url}/a.png"))
    assert [path for path, _ in site.requests] == ["/a.png"]
    assert proxy.requests == []


async def test_the_address_checked_is_the_address_connected_to(site, monkeypatch):
    # A name that answers 127.0.0.1 (allowed) once, then 127.0.0.2 (not allowed, and
    # nobody listens there): the fetch resolves it once and connects to what it checked.
    real = socket.getaddrinfo
    answers = iter(["127.0.0.1"])

    def rebinding(host, port, *args, **kwargs):
        if host != "images.test":
            return real(host, port, *args, **kwargs)
        address = next(answers, "127.0.0.2")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    site.requests.clear()
    url = f"http://images.test:{site.server_port}/a.png"
    allow = [ip_network("127.0.0.1/32")]
    assert await fetch_image(url, max_bytes=1 << 20, deadline=10, allow=allow) == PNG
    assert site.requests[0][1]["host"] == f"images.test:{site.server_port}"
    with pytest.raises(FetchFailed, match="127.0.0.2, not a public address"):
        await fetch_image(url, max_bytes=1 << 20, deadline=10, allow=allow)


def test_only_wire_bytes_are_counted_and_nothing_is_decompressed(allowing, site):
    # Before, the 50 KB gzip body was decoded (to 50 MB) and the cap counted what came out.
    site.requests.clear()
    assert error(ask(allowing, f"{site.url}/bomb.png")).endswith("could not fetch image 1")
    assert site.requests[0][1]["accept-encoding"] == "identity"
    failed = allowing.wait_event(
        "image_fetch_failed", reason="a 'gzip'-encoded body, when identity was asked for"
    )
    assert failed["where"] == "$.messages[0].content[0].image_url"


def test_a_dripping_server_meets_one_deadline_for_the_whole_fetch(allowing, site):
    # A byte every 0.2 s never trips a per-read timeout; limits.fetch_timeout (1 s) ends it.
    started = time.monotonic()
    assert error(ask(allowing, f"{site.url}/drip.png")).endswith("could not fetch image 1")
    assert time.monotonic() - started < 5
    allowing.wait_event("image_fetch_failed", reason="not fetched within 1 s")


@pytest.fixture(scope="module")
def patient(tmp_path_factory):
    """127.0.0.1 allowed and a deadline long enough that only the client leaving ends a fetch."""
    text = CONFIG.format(allow="fetch_images_allow: [127.0.0.1/32]", timeout="60s")
    with serving(tmp_path_factory.mktemp("patient"), text) as process:
        yield process


def drip_requests(url: str) -> list[tuple[str, dict]]:
    image = {"type": "image_url", "image_url": {"url": url}}
    anthropic = {"type": "image", "source": {"type": "url", "url": url}}
    return [
        ("/v1/chat/completions", {"model": "echo", "messages": [{"role": "user", "content": [image]}]}),
        ("/v1/responses", {"model": "echo", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": url}]}]}),
        ("/v1/messages", {"model": "echo", "max_tokens": 8, "messages": [
            {"role": "user", "content": [anthropic]}]}),
        ("/v1/messages/count_tokens", {"model": "echo", "messages": [
            {"role": "user", "content": [anthropic]}]}),
        ("/api/chat", {"model": "echo", "messages": [{"role": "user", "content": "x", "images": [url]}]}),
        ("/api/generate", {"model": "echo", "prompt": "x", "images": [url]}),
    ]  # fmt: skip


def test_a_fetch_stops_when_its_client_leaves(patient, site):
    for path, body in drip_requests(f"{site.url}/drip.png"):
        ended = len(site.drips_ended)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{patient.url}{path}", json=body, timeout=1)
        left = time.monotonic()
        while len(site.drips_ended) == ended and time.monotonic() - left < 10:
            time.sleep(0.05)
        assert len(site.drips_ended) > ended, f"{path}: the fetch went on without its client"
        assert site.drips_ended[-1] - left < 3, path
