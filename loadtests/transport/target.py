"""The HTTP client layer under gevent: one client (kept-alive connection) per user.

Two clients, chosen per target (``--http-client``): ``http1`` (the default,
``loadtests.transport.http1``: a socket read directly, HTTP/1.1 framing in
``loadtests.transport.framing``) and ``httpx``, the general client it replaced as the default
because httpx/httpcore/h11 took most of the load generator's CPU at 1,000 streams
(the profiles: ``docs/scale.md``, *The load generator*).  A target whose responses
the http1 client cannot read (another transfer or content coding) moves to httpx at
the first such response.
Both hand each read to the timing core as it arrives, for chunked and
close-delimited bodies alike, while locust's ``HttpSession`` (requests) buffers
close-delimited bodies and ``FastHttpSession`` (geventhttpclient) holds events
back until ~1 KB (``python -m bench harness``, BENCHMARKS.md).

Failures map to the record's error classes: ``connect`` (no connection),
``stall`` (streaming: no byte for ``--stall-timeout``; also before the headers),
``timeout`` (the whole request over ``--request-timeout``; sync requests have
only this one), ``disconnect`` (the body was cut short).
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import gevent
import httpcore
import httpx

from llmload.loadtests.measure.adapters.base import (
    DEFAULT_KEY_HEADER,
    HttpCall,
    api_key_header,
)
from llmload.loadtests.measure.caps import OverCap, body_over
from llmload.loadtests.measure.timing import StreamTimer
from llmload.loadtests.options import ConnectionOptions
from llmload.loadtests.redact import redact_url
from llmload.loadtests.transport.connect import connector, take_connect_s
from llmload.loadtests.transport.framing import ProtocolError, Unsupported
from llmload.loadtests.transport.http1 import Failed, Http1Client, Origin

clock = time.perf_counter
#: the wall-clock time at ``clock()``'s zero, read once per process
_EPOCH = time.time() - clock()


def wall(t: float) -> float:
    """The wall-clock time of ``clock()`` reading ``t``: a record's ``started_at`` is its ``t0``
    on this one time base, so ``started_at - schedule_delay_s`` is the intended send time
    exactly (two clock reads in a row may be a preemption apart on a busy machine)."""
    return _EPOCH + t


#: seconds allowed for the TCP (and TLS) connect before ``connect``
CONNECT_TIMEOUT_S = 10.0


class TargetUnreachable(Exception):
    """The target did not answer at all (one-line message, no secrets)."""


class _RequestDeadline(Exception):
    """Raised inside a request greenlet when ``--request-timeout`` expires."""


@dataclass
class Target:
    """Where requests go: base URL (path prefix kept), headers, TLS, timeouts.

    It reads its timeouts, TLS settings, client and read caps from the run's
    ``ConnectionOptions`` (declared there once); ``url`` is the connection's target
    unless given (``--baseline-target``), ``headers`` the resolved ones (``--header``
    and the API key, ``from_options``).  ``base_url`` never holds credentials:
    ``user:pass@`` in the URL becomes the clients' basic auth, so what is printed or
    logged about the target is clean.
    """

    connection: ConnectionOptions = field(repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    url: str = field(default="", repr=False)

    @property
    def request_timeout(self) -> float:
        return float(self.connection.request_timeout)

    @property
    def stall_timeout(self) -> float:
        return float(self.connection.stall_timeout)

    @property
    def ca_bundle(self) -> str | None:
        return self.connection.ca_bundle

    @property
    def insecure(self) -> bool:
        return bool(self.connection.insecure)

    @property
    def http_client(self) -> str:
        """``http1`` (``loadtests.transport.http1``) or ``httpx``: each user's client."""
        return str(self.connection.http_client)

    @property
    def max_event_bytes(self) -> int:
        """What one SSE event may hold (``loadtests.measure.caps``)."""
        return int(self.connection.max_event_bytes)

    @property
    def max_body_bytes(self) -> int:
        """What one (decoded) response body may hold (``loadtests.measure.caps``)."""
        return int(self.connection.max_body_bytes)

    def __post_init__(self) -> None:
        self.url = self.url or self.connection.target
        parts = urlsplit(self.url if "://" in self.url else f"http://{self.url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"target must be an http(s) URL with a host: {redact_url(self.url)!r}")
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            raise ValueError("target URL: the port is not a number") from None
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):  # OpenAI-style base URLs end in /v1; adapter paths carry it
            path = path[: -len("/v1")]
        self.auth: httpx.BasicAuth | None = None
        self._basic: str | None = None  # the same credentials as a header, for the http1 client
        if parts.username is not None or parts.password is not None:
            user, password = unquote(parts.username or ""), unquote(parts.password or "")
            self.auth = httpx.BasicAuth(user, password)
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            self._basic = f"Basic {token}"
        netloc = parts.netloc.rpartition("@")[2]
        self.base_url = urlunsplit((parts.scheme, netloc, path, "", ""))
        self.params: list[tuple[str, str | int | float | bool | None]] = list(
            parse_qsl(parts.query, keep_blank_values=True)
        )
        self._ssl: ssl.SSLContext | None = None
        self._urls: dict[str, httpx.URL] = {}
        self._origin: Origin | None = None
        self._build: httpx.Client | None = None
        _redact_httpx_log()

    @classmethod
    def from_options(cls, opts: ConnectionOptions, url: str = "") -> Target:
        """Build from the run's connection options (reads the API key from its variable);
        ``url``: another target than ``opts.target`` with the same connection settings."""
        headers = opts.headers_dict()
        env = opts.api_key_env
        if env:
            key = os.environ.get(env)
            if not key:
                raise ValueError(f"--api-key-env {env}: that environment variable is empty")
            name = api_key_header(opts.protocol)  # Authorization, or e.g. x-api-key
            if not any(k.lower() == name.lower() for k in headers):
                headers[name] = f"Bearer {key}" if name == DEFAULT_KEY_HEADER else key
        if opts.ca_bundle and not os.path.isfile(opts.ca_bundle):
            raise ValueError(f"--ca-bundle {opts.ca_bundle}: no such file")
        return cls(opts, headers, url)

    def ssl_context(self) -> ssl.SSLContext:
        """One TLS context per process, shared by every client (building one costs ms)."""
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=self.ca_bundle)
            if self.ca_bundle is None:
                import certifi

                ctx.load_verify_locations(certifi.where())
            if self.insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx
        return self._ssl

    def user_client(self) -> Http1Client | httpx.Client:
        """A simulated user's client for ``perform``: http1, unless ``http_client`` says httpx."""
        if self.http_client == "httpx":
            return self.httpx_client()
        return Http1Client(self.origin())

    def origin(self) -> Origin:
        """What the http1 client sends to this target (one per process, shared by every user)."""
        if self._origin is None:
            parts = urlsplit(self.base_url)
            scheme = parts.scheme
            port = parts.port or (443 if scheme == "https" else 80)
            merged = self._builder().headers.copy()  # httpx's defaults, then the target's
            merged["accept-encoding"] = "gzip, deflate"  # what loadtests.transport.framing decodes
            if self._basic is not None:
                merged["authorization"] = self._basic
            headers = [("Host", parts.netloc), *merged.items()]
            self._origin = Origin(
                scheme,
                parts.hostname or "",
                port,
                headers,
                self.url_of,
                self.ssl_context,
                CONNECT_TIMEOUT_S,
                self.max_body_bytes,
            )
        return self._origin

    def url_of(self, path: str) -> httpx.URL:
        """The full URL of an adapter's ``path``: base URL, path prefix, the target's query."""
        url = self._urls.get(path)
        if url is None:
            url = self._builder().build_request("GET", path).url
            if len(self._urls) < 256:
                self._urls[path] = url
        return url

    def _builder(self) -> httpx.Client:
        """A client that never sends: httpx's URL joining and header defaults, made once."""
        if self._build is None:
            self._build = httpx.Client(
                base_url=self.base_url, params=self.params, headers=self.headers, trust_env=False
            )
        return self._build

    def httpx_client(self) -> httpx.Client:
        """A client for one simulated user: its connection is kept alive between requests.

        Connections are opened by ``loadtests.transport.connect`` (no resolver round trip per
        connection, the request in one send): what a server that closes every
        connection costs the measurement is one TCP connect, nothing more.
        """
        transport = httpx.HTTPTransport(verify=self.ssl_context(), trust_env=False)
        # httpx has no public hook for httpcore's network backend: same pool, our connector
        transport._pool = httpcore.ConnectionPool(
            ssl_context=self.ssl_context(),
            max_connections=4,
            max_keepalive_connections=1,
            keepalive_expiry=5.0,
            network_backend=connector(),
        )
        client = httpx.Client(
            base_url=self.base_url,
            auth=self.auth,
            params=self.params,
            headers=self.headers,
            trust_env=False,
            timeout=httpx.Timeout(self.request_timeout, connect=CONNECT_TIMEOUT_S),
            transport=transport,
        )
        client._cookies = SetCookieJar()  # the cookies setter would copy it into a plain one
        return client

    def request(
        self,
        client: httpx.Client,
        call: HttpCall,
        timeout: httpx.Timeout,
        timer: StreamTimer | None = None,
    ) -> httpx.Request:
        """``call`` as the request ``client.build_request`` would make, more cheaply.

        The URL (base, path prefix, query) is built once per path and the
        client's headers copied, instead of httpx re-parsing and merging both
        per request, in series when many users send together (what that cost:
        ``docs/scale.md``, *The load generator*).  A client holding cookies (a
        sticky-session load balancer) takes httpx's own path, which sends them back.
        ``timer`` is told when the request's last byte was written (httpcore's trace).
        """
        extensions: dict[str, Any] = {"timeout": timeout.as_dict()}
        if timer is not None:
            extensions["trace"] = _trace_sent(timer)
        if client.cookies:
            return client.build_request(
                call.method,
                call.path,
                json=call.json,
                headers=call.headers,
                extensions=extensions,
            )
        url = self._urls.get(call.path)
        if url is None:
            url = client.build_request("GET", call.path).url
            if len(self._urls) < 256:
                self._urls[call.path] = url
        headers = client.headers.copy()
        if call.headers:
            headers.update(call.headers)
        return httpx.Request(
            call.method, url, headers=headers, json=call.json, extensions=extensions
        )

    def probe(self, timeout: float = 5.0) -> httpx.Response:
        """One GET of ``/v1/models``; raises ``TargetUnreachable`` when nothing answers.

        Also warms this process's HTTP stack up (the first httpx request in a
        process pays tens of ms once), so measured requests do not carry it.
        """
        with self.httpx_client() as client:
            try:
                return client.get("/v1/models", timeout=timeout)
            except httpx.TransportError as exc:
                raise TargetUnreachable(
                    f"cannot reach target {self.base_url}: {_describe(exc)}"
                ) from None

    def detect_model(self) -> str | None:
        """The first model id ``/v1/models`` lists, or None."""
        try:
            resp = self.probe()
            data = resp.json().get("data") if resp.status_code == 200 else None
            return str(data[0]["id"]) if data else None
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return None


def _trace_sent(timer: StreamTimer) -> Callable[[str, dict[str, Any]], None]:
    """An httpcore trace hook that tells ``timer`` when the request body was written."""

    def trace(event: str, _info: dict[str, Any]) -> None:
        if event in ("http11.send_request_body.complete", "http2.send_request_body.complete"):
            timer.sent(clock())

    return trace


class SetCookieJar(httpx.Cookies):
    """httpx's cookie jar, which looks at a response only when it sets a cookie.

    httpx hands every response to the jar; wrapping it for ``http.cookiejar`` was a
    visible share of the load generator's CPU at 1,000 streams (py-spy:
    ``docs/scale.md``, *The load generator*) — for the LLM servers that set none.
    A ``Set-Cookie`` (a sticky-session load balancer) is stored and sent back as before.
    """

    def extract_cookies(self, response: httpx.Response) -> None:
        """Store the response's cookies, if it has any."""
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


def perform(
    client: Http1Client | httpx.Client,
    target: Target,
    call: HttpCall,
    timer: StreamTimer,
    follow_up: Callable[[bytes], HttpCall] | None = None,
) -> tuple[str | None, str | None]:
    """Send ``call``, feeding ``timer`` as bytes arrive; ``(status, error)`` of a transport failure.

    Returns ``(None, None)`` when the exchange completed at the HTTP level (the
    timer then decides ok / http_4xx / protocol / ...).  ``GreenletExit`` is not
    caught: the caller records the cancellation and re-raises.  ``client`` is a
    user's ``Target.user_client()`` (or an httpx client).
    """
    deadline = gevent.Timeout(target.request_timeout, _RequestDeadline())
    deadline.start()
    try:
        if isinstance(client, Http1Client):
            if client.origin.unsupported is None:
                return _perform_http1(client, target, call, timer, follow_up)
            client = client.fallback(target.httpx_client)
        return _perform_httpx(client, target, call, timer, follow_up)
    except _RequestDeadline:
        return "timeout", f"no complete response within {target.request_timeout:g}s"
    except OverCap as exc:  # the connection was closed on the way out, not reused
        return "protocol", str(exc)
    finally:
        deadline.close()


def _second_step(
    status: int, body: bytes, timer: StreamTimer, follow_up: Callable[[bytes], HttpCall]
) -> tuple[HttpCall | None, tuple[str | None, str | None]]:
    """A two-step protocol's second call from the first answer, or the request's result."""
    if not 200 <= status < 300:  # recorded like any HTTP error
        timer.headers(clock(), status)
        timer.feed_body(body, clock())
        return None, (None, None)
    try:
        return follow_up(body), (None, None)
    except ValueError as exc:
        return None, ("protocol", f"unreadable first response: {exc}")


def _perform_http1(
    client: Http1Client,
    target: Target,
    call: HttpCall,
    timer: StreamTimer,
    follow_up: Callable[[bytes], HttpCall] | None,
) -> tuple[str | None, str | None]:
    read = target.stall_timeout if call.stream else target.request_timeout
    try:
        if follow_up is not None:
            second, result = _second_step(
                *client.fetch(call, target.request_timeout), timer, follow_up
            )
            if second is None:
                return result
            call = second
            read = target.stall_timeout if call.stream else target.request_timeout
        client.send(call, timer, read)
        return None, None
    except Failed as exc:
        return exc.status, str(exc)
    except ProtocolError as exc:
        return "disconnect", f"RemoteProtocolError: {exc}"
    except zlib.error as exc:
        return "protocol", f"DecodingError: {exc}"
    except Unsupported as exc:
        if client.origin.unsupported is None:
            client.origin.unsupported = str(exc)
            print(
                f"llmload: the target answered with {exc}, which the http1 HTTP client "
                "does not read; its later requests go through httpx",
                file=sys.stderr,
                flush=True,
            )
        return "protocol", f"{exc}: not read by the http1 HTTP client (later requests use httpx)"


def _perform_httpx(
    client: httpx.Client,
    target: Target,
    call: HttpCall,
    timer: StreamTimer,
    follow_up: Callable[[bytes], HttpCall] | None,
) -> tuple[str | None, str | None]:
    read = target.stall_timeout if call.stream else target.request_timeout
    timeout = httpx.Timeout(target.request_timeout, connect=CONNECT_TIMEOUT_S, read=read)
    try:
        if follow_up is not None:
            first = client.request(call.method, call.path, json=call.json, headers=call.headers)
            second, result = _second_step(first.status_code, first.content, timer, follow_up)
            if second is None:
                return result
            call = second
        resp = client.send(target.request(client, call, timeout, timer), stream=True)
        try:
            timer.headers(clock(), resp.status_code)
            connect_s = take_connect_s(resp.extensions.get("network_stream"))
            if connect_s is not None:
                timer.connected(connect_s)
            left = target.max_body_bytes
            if call.stream:
                for chunk in resp.iter_bytes():
                    left -= len(chunk)
                    if left < 0:
                        raise body_over(target.max_body_bytes)
                    timer.feed(chunk, clock())
            else:
                parts = []
                for chunk in resp.iter_bytes():
                    left -= len(chunk)
                    if left < 0:
                        raise body_over(target.max_body_bytes)
                    parts.append(chunk)
                timer.feed_body(b"".join(parts), clock())
        finally:
            resp.close()
        return None, None
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        return "connect", _describe(exc)
    except httpx.ReadTimeout:
        if call.stream:
            return "stall", f"no bytes for {target.stall_timeout:g}s"
        return "timeout", f"no complete response within {target.request_timeout:g}s"
    except (httpx.WriteTimeout, httpx.PoolTimeout) as exc:
        return "timeout", _describe(exc)
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        return "disconnect", _describe(exc)
    except httpx.DecodingError as exc:
        return "protocol", _describe(exc)
    except httpx.TransportError as exc:
        return "disconnect", _describe(exc)


class _RedactUrls(logging.Filter):
    """httpx logs each request's full URL at INFO: secret query values come out redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_url(str(a)) if isinstance(a, httpx.URL) else a for a in record.args
            )
        return True


def _redact_httpx_log() -> None:
    """Install ``_RedactUrls`` on the ``httpx`` logger once per process."""
    logger = logging.getLogger("httpx")
    if not any(isinstance(f, _RedactUrls) for f in logger.filters):
        logger.addFilter(_RedactUrls())


def _describe(exc: BaseException) -> str:
    """A short one-line reason (exception type and first line of its message)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
