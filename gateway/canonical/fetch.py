"""Fetching one remote image (`server.fetch_images`) without lending the gateway to its sender.

Every URL — the client's and each redirect's — is resolved once, every address it resolves
to must be public (or inside `server.fetch_images_allow`), and the connection goes to the
address that was checked, the name kept for `Host` and TLS (SNI and the certificate): a
name cannot answer public for the check and private for the connect. Proxy variables in
the environment are ignored. Any failure is one `FetchFailed`, whose reason is for the log
only: the client hears the same words whether a port is closed, open or answers 404.

A fetch costs at most its bounds: one deadline for the whole of it, redirects included
(not per read, which a server dripping a byte at a time never trips), and `max_bytes` of
wire bytes — only identity encoding is asked for or accepted, as a few KB of gzip or zstd
can decode to gigabytes before a cap on decoded bytes sees them.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

import httpx

MAX_REDIRECTS = 3

Network = IPv4Network | IPv6Network
# Not public although `is_global` may say so: addresses that carry or reach another one
# (NAT64, 6to4), carrier-grade NAT, link-local (cloud metadata at 169.254.169.254).
BLOCKED = tuple(
    ip_network(n)
    for n in ("64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "100.64.0.0/10", "169.254.0.0/16")
)


class FetchFailed(Exception):
    """The image could not be fetched; `str()` says why, for the operator's log."""


def is_public(address: IPv4Address | IPv6Address, allow: Sequence[Network] = ()) -> bool:
    """True for an address a fetch may connect to: global, or in the operator's `allow`."""
    if isinstance(address, IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if any(address in network for network in allow):
        return True
    blocked = address.is_multicast or any(address in network for network in BLOCKED)
    return address.is_global and not blocked


async def fetch_image(
    url: str, *, max_bytes: int, deadline: float, allow: Sequence[Network] = ()
) -> bytes:
    """The body of `url`, following up to MAX_REDIRECTS redirects, within `deadline`
    seconds in all; `FetchFailed` if not."""
    try:
        async with asyncio.timeout(deadline):
            return await _fetch(url, max_bytes, allow)
    except TimeoutError:
        raise FetchFailed(f"not fetched within {deadline:g} s") from None


async def _fetch(url: str, max_bytes: int, allow: Sequence[Network]) -> bytes:
    async with httpx.AsyncClient(trust_env=False, follow_redirects=False) as client:
        target = _url(url)
        for _ in range(MAX_REDIRECTS + 1):
            address = await _checked_address(target, allow)
            request = client.build_request(
                "GET",
                target.copy_with(host=str(address)),
                headers={"host": target.netloc.decode("ascii"), "accept-encoding": "identity"},
                extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
            )
            try:
                response = await client.send(request, stream=True)
                try:
                    if not response.is_redirect:
                        return await _body(response, max_bytes)
                finally:
                    await response.aclose()
            except httpx.HTTPError as error:
                raise FetchFailed(f"{target.host} ({address}): {error!r}") from None
            target = _url(str(target.join(response.headers.get("location", ""))))
    raise FetchFailed(f"more than {MAX_REDIRECTS} redirects")


def _url(text: str) -> httpx.URL:
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL:
        raise FetchFailed("not a valid URL") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise FetchFailed(f"not an http(s) URL (scheme {url.scheme!r})")
    return url


async def _checked_address(url: httpx.URL, allow: Sequence[Network]) -> IPv4Address | IPv6Address:
    """The one address the fetch connects to: the name resolved once, every answer public."""
    port = url.port or (443 if url.scheme == "https" else 80)
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(url.host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise FetchFailed(f"{url.host} does not resolve ({error})") from None
    addresses = [ip_address(info[4][0]) for info in infos]
    for address in addresses:
        if not is_public(address, allow):
            raise FetchFailed(f"{url.host} is {address}, not a public address")
    if not addresses:
        raise FetchFailed(f"{url.host} does not resolve")
    return addresses[0]


async def _body(response: httpx.Response, max_bytes: int) -> bytes:
    if response.status_code != 200:
        raise FetchFailed(f"{response.url.host} answered HTTP {response.status_code}")
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":
        raise FetchFailed(f"a {encoding!r}-encoded body, when identity was asked for")
    if int(response.headers.get("content-length") or 0) > max_bytes:
        raise FetchFailed(f"the body is larger than {max_bytes} bytes")
    body = bytearray()
    async for chunk in response.aiter_raw():  # the wire bytes, never decoded
        body += chunk
        if len(body) > max_bytes:
            raise FetchFailed(f"the body is larger than {max_bytes} bytes")
    return bytes(body)
