"""One HTTP GET of a data set file: only http(s), safe redirects, status triage.

``http.client`` rather than ``urllib.request``: urllib follows redirects on
its own, to ftp:// as well, and hides the status of partial answers behind
its handlers. Here every redirect hop is checked against the allowed schemes
and the caller sees the raw status and headers it needs to resume safely.
"""

from __future__ import annotations

import http.client
import re
import ssl
import urllib.parse
from dataclasses import dataclass

from .errors import DownloadError, TransientError
from .retry import parse_retry_after

ALLOWED_SCHEMES = ("http", "https")
MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "nodeprep-data-download/1"
_CONTENT_RANGE = re.compile(r"^bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)$")


@dataclass(frozen=True)
class ContentRange:
    """A parsed ``Content-Range: bytes start-end/total``; None for the parts shown as ``*``."""

    start: int | None
    end: int | None
    total: int | None


def parse_content_range(value: str | None) -> ContentRange | None:
    """The Content-Range of a 206 or 416 answer; None when absent or malformed."""
    match = _CONTENT_RANGE.match((value or "").strip())
    if match is None:
        return None
    start, end, total = match.groups()
    return ContentRange(
        start=int(start) if start is not None else None,
        end=int(end) if end is not None else None,
        total=int(total) if total != "*" else None,
    )


def check_url(url: str) -> urllib.parse.SplitResult:
    """The split URL, or DownloadError when it is not an absolute http(s) URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ALLOWED_SCHEMES or not parts.hostname:
        raise DownloadError(
            f"{url!r} is not an http:// or https:// URL with a host; only those are downloaded"
        )
    return parts


@dataclass
class Exchange:
    """An open response and the connection it arrived on; close both with ``close``."""

    connection: http.client.HTTPConnection
    response: http.client.HTTPResponse
    url: str

    def close(self) -> None:
        self.response.close()
        self.connection.close()


def open_get(url: str, headers: dict[str, str], timeout: float) -> Exchange:
    """GET ``url``, following at most MAX_REDIRECTS redirects, each to http or https only."""
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        exchange = _get_once(current, headers, timeout)
        location = exchange.response.getheader("Location")
        if exchange.response.status not in REDIRECT_STATUSES or not location:
            return exchange
        exchange.close()
        target = urllib.parse.urljoin(current, location)
        if urllib.parse.urlsplit(target).scheme not in ALLOWED_SCHEMES:
            raise DownloadError(
                f"{url} redirects to {target}, which is not http or https; refusing to follow it"
            )
        current = target
    raise DownloadError(f"{url} redirects more than {MAX_REDIRECTS} times; fix the URL or server")


def _get_once(url: str, headers: dict[str, str], timeout: float) -> Exchange:
    parts = check_url(url)
    host = parts.hostname or ""
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(host, parts.port, timeout=timeout)
    else:
        connection = http.client.HTTPConnection(host, parts.port, timeout=timeout)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("GET", target, headers={"User-Agent": USER_AGENT, **headers})
        response = connection.getresponse()
    except ssl.SSLCertVerificationError as exc:
        connection.close()
        raise DownloadError(f"{url}: the server's TLS certificate is not trusted ({exc})") from exc
    except (OSError, http.client.HTTPException) as exc:
        connection.close()
        raise TransientError(f"GET {url} failed: {exc!r}") from exc
    return Exchange(connection, response, url)


def triage(exchange: Exchange, asked: str) -> None:
    """Return for a status with a body worth reading (200, 206, 416); raise for the others.

    408, 429 and 5xx are worth retrying (TransientError, with the server's
    Retry-After); any other status will answer the same next time
    (DownloadError, at once).
    """
    status = exchange.response.status
    if status in (200, 206, 416):
        return
    via = "" if exchange.url == asked else f" (redirected to {exchange.url})"
    reason = f"GET {asked}{via} answered HTTP {status} {exchange.response.reason}"
    if status in (408, 429) or 500 <= status <= 599:
        retry_after = parse_retry_after(exchange.response.getheader("Retry-After"))
        raise TransientError(reason, retry_after)
    raise DownloadError(f"{reason}; check the URL and that this node may read it")
