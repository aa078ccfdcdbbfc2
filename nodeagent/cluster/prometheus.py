"""Reading nodeagent's metrics back from a Prometheus server: its HTTP API
(https://prometheus.io/docs/prometheus/latest/querying/api/), standard library only.

- `STATUS_VALUE`: the numbers nodeagent's metrics give statuses (nodeagent.render.prometheus writes
  them, the fleet view reads them back), `status_of` the other way.
- `selector_matchers`: a `--selector` such as `{job="gpu-nodes"}` checked by structure and turned
  into label matchers that can join the other matchers of a query.
- `Client`: instant queries (`/api/v1/query`) at one evaluation time, and the scrape targets'
  health (`/api/v1/targets`). Every answer is parsed by schema (pydantic); a server that cannot be
  reached, does not answer in time (the whole request, `timeout_s`), redirects elsewhere (never
  followed: the credentials would go along) or does not answer like Prometheus is one line naming
  the URL (PrometheusUnavailable, exit 69), a query Prometheus rejects is one line naming the query
  (exit 64: the part of a query the user writes is the selector).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import math
import re
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from nodeagent import __version__
from nodeagent.core import limits, pool
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Status

# The numbers of nodeagent's status gauges, the same as `nodeagent check`'s exit codes apart from
# SKIPPED, so that `> 0` means "look at it".
STATUS_VALUE = {Status.SKIPPED: -1, Status.OK: 0, Status.WARN: 1, Status.FAIL: 2, Status.UNKNOWN: 3}
_STATUS_OF = {v: s for s, v in STATUS_VALUE.items()}

# sysexits.h EX_UNAVAILABLE: the service nodeagent depends on (Prometheus) is not there.
EX_UNAVAILABLE = 69
# An answer larger than this is refused while it is read, before it is parsed.
_MAX_ANSWER = "NODEAGENT_MAX_PROMETHEUS_MIB"
_ERROR_TEXT = 300  # characters of a non-JSON answer quoted in an error


class PrometheusUnavailable(UsageError):
    """Prometheus could not be reached, did not answer in time, or did not answer like Prometheus."""

    exit_code = EX_UNAVAILABLE


def status_of(value: float) -> Status | None:
    """The status a status gauge's value stands for; None for a number nodeagent never writes."""
    if not math.isfinite(value) or not float(value).is_integer():
        return None
    return _STATUS_OF.get(int(value))


# --- selectors ----------------------------------------------------------------------------------

# One label matcher of PromQL: a label name, an operator and a quoted string (double or single
# quotes with backslash escapes, or backquotes without).
# https://prometheus.io/docs/prometheus/latest/querying/basics/#time-series-selectors
_MATCHER = re.compile(
    r"""\s*(?P<label>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op>=~|!~|!=|=)\s*
        (?P<value>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)\s*(?P<end>,|$)""",
    re.VERBOSE,
)


def selector_matchers(selector: str | None) -> str:
    """The label matchers of `selector` (`{job="x"}`, `job="x",env=~"a|b"` or `{}`), joined with
    commas, ready to stand beside other matchers inside braces; "" when there are none.

    UsageError naming the part that is not a matcher. Only label matchers: the selector narrows
    which nodes are read, and nodeagent chooses the metrics (a metric name or `__name__` in it is
    refused)."""
    text = (selector or "").strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    elif "{" in text or "}" in text:
        raise UsageError(
            f"--selector {selector!r}: give label matchers only, e.g. '{{job=\"gpu-nodes\"}}' "
            "(no metric name: nodeagent chooses its metrics)"
        )
    matchers: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _MATCHER.match(text, pos)
        if m is None or (m.group("end") == "," and m.end() == len(text)):
            raise UsageError(
                f"--selector {selector!r}: {text[pos:].strip()!r} is not a label matcher; write "
                'NAME="VALUE" (or !=, =~, !~), separated by commas'
            )
        if m.group("label") == "__name__":
            raise UsageError(f"--selector {selector!r}: leave out __name__: nodeagent chooses its metrics")
        matchers.append(f"{m.group('label')}{m.group('op')}{m.group('value')}")
        pos = m.end()
    return ",".join(matchers)


def selector(metric: str, matchers: str, extra: str = "") -> str:
    """`metric{extra,matchers}` (either part may be empty)."""
    inner = ",".join(part for part in (extra, matchers) if part)
    return f"{metric}{{{inner}}}"


# --- the HTTP API's answers ---------------------------------------------------------------------


class _Model(BaseModel):
    # Prometheus adds fields between versions: what is not read here is ignored.
    model_config = ConfigDict(extra="ignore", frozen=True)


_M = TypeVar("_M", bound=_Model)


class _Answer(_Model):
    """Every answer of the API: https://prometheus.io/docs/prometheus/latest/querying/api/#format-overview"""

    status: Literal["success", "error"]
    data: Any = None
    errorType: str = ""
    error: str = ""
    warnings: list[str] = []


class _VectorSample(_Model):
    metric: dict[str, str]
    value: tuple[float, str]


class _Vector(_Model):
    resultType: Literal["vector"]
    result: list[_VectorSample]


class _Scalar(_Model):
    resultType: Literal["scalar"]
    result: tuple[float, str]


class _Target(_Model):
    labels: dict[str, str]
    scrapeUrl: str = ""
    health: Literal["up", "down", "unknown"]
    lastError: str = ""
    lastScrape: str = ""


class _Targets(_Model):
    activeTargets: list[_Target]


@dataclass(frozen=True)
class Sample:
    """One series of an instant vector: its labels (with `__name__` when Prometheus kept it) and
    its value at the evaluation time."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class Target:
    """A scrape target as Prometheus last saw it."""

    labels: Mapping[str, str]
    health: str  # "up", "down" or "unknown" (not scraped yet)
    last_error: str
    last_scrape: str
    scrape_url: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.labels.get("job", ""), self.labels.get("instance", ""))


@dataclass(frozen=True)
class Evaluation:
    """An evaluation time of Prometheus's own clock: the text it gave (passed back as it is, so
    every query of one view is evaluated at the same instant) and its value."""

    text: str
    seconds: float


# --- the client ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """A Prometheus server's base URL, with the credentials of a `user:password@` kept apart so
    that no message ever shows the password."""

    base: str  # scheme://host[:port][/prefix], no trailing slash, no credentials
    authorization: str | None  # an HTTP Basic Authorization header value

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """UsageError (exit 64) naming the URL unless it is an http(s) URL of a server."""
        try:
            parts = urllib.parse.urlsplit(url.strip())
            port = parts.port  # ValueError for a port out of range or not a number
        except ValueError as e:
            raise UsageError(f"--prometheus {url!r}: not a URL ({e}); e.g. http://prometheus:9090") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(
                f"--prometheus {url!r}: give the server's http:// or https:// address, "
                "e.g. http://prometheus:9090"
            )
        if parts.query or parts.fragment:
            raise UsageError(f"--prometheus {url!r}: give the server's address without ?query or #fragment")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        netloc = host if port is None else f"{host}:{port}"
        base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        auth = None
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return cls(base, auth)


class Client:
    """Prometheus's HTTP API at `url`; each request, whole, within `timeout_s` seconds."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.endpoint = Endpoint.parse(url)
        self.timeout_s = timeout_s
        self._warnings: list[str] = []

    @property
    def url(self) -> str:
        return self.endpoint.base

    def now(self) -> Evaluation:
        """Prometheus's current time (the query `time()`), to evaluate a view's queries at."""
        answer = self._answer("/api/v1/query", {"query": "time()"}, "time()")
        data = self._parse(_Scalar, answer.data, "time()")
        return Evaluation(data.result[1], data.result[0])

    def query(self, promql: str, at: Evaluation) -> list[Sample]:
        """The instant vector `promql` evaluates to at `at`."""
        answer = self._answer("/api/v1/query", {"query": promql, "time": at.text}, promql)
        data = self._parse(_Vector, answer.data, promql)
        return [Sample(s.metric, _number(s.value[1], promql, self.url)) for s in data.result]

    def targets(self) -> list[Target]:
        """The active scrape targets and their health."""
        answer = self._answer("/api/v1/targets", {"state": "active"}, "targets")
        data = self._parse(_Targets, answer.data, "targets")
        return [
            Target(t.labels, t.health, t.lastError, t.lastScrape, t.scrapeUrl) for t in data.activeTargets
        ]

    def warnings(self) -> list[str]:
        """What Prometheus warned about in the answers so far (a partial answer, say)."""
        return list(self._warnings)

    # -- one request ---------------------------------------------------------------------------

    def _answer(self, path: str, params: Mapping[str, str], what: str) -> _Answer:
        status, body = self.get(path, params)
        where = f"{self.url}{path}"
        try:
            raw = limits.loads_json(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            shown = body[:_ERROR_TEXT].decode(errors="replace").strip()
            raise PrometheusUnavailable(
                f"{where} answered HTTP {status} without JSON ({shown!r}): "
                f"is {self.url} the address of Prometheus?"
            ) from None
        except ValueError as e:  # nested too deeply
            raise PrometheusUnavailable(f"{where} answered JSON {e}") from None
        if status >= 400 and not _is_answer(raw):  # a proxy or gateway in front of Prometheus
            shown = body[:_ERROR_TEXT].decode(errors="replace").strip()
            raise PrometheusUnavailable(f"{where} answered HTTP {status}: {shown}")
        answer = self._parse(_Answer, raw, what)
        if answer.status == "error" or status >= 400:
            self._refused(status, answer, what)
        self._warnings.extend(w for w in answer.warnings if w not in self._warnings)
        return answer

    def _refused(self, status: int, answer: _Answer, what: str) -> None:
        problem = answer.error or f"HTTP {status}"
        kind = f" ({answer.errorType})" if answer.errorType else ""
        if answer.errorType == "bad_data":
            raise UsageError(f"Prometheus at {self.url} refused the query `{what}`: {problem}{kind}")
        raise PrometheusUnavailable(f"Prometheus at {self.url} could not answer `{what}`: {problem}{kind}")

    def _parse(self, model: type[_M], data: Any, what: str) -> _M:
        try:
            return model.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "(the answer)"
            raise PrometheusUnavailable(
                f"{self.url} did not answer `{what}` as Prometheus's HTTP API does: {field}: {first['msg']}"
            ) from None

    def get(self, path: str, params: Mapping[str, str]) -> tuple[int, bytes]:
        """GET `path` with `params`: the HTTP status and the body (an error's body too, since
        Prometheus explains a refusal there).

        The whole request, connecting, the headers and the body, within `timeout_s`: a socket's
        timeout bounds each read only, and a server sending a byte now and then, each in time, held
        the view as long as it liked. The request runs on a pool worker (the resolver cannot be
        interrupted) and, when overdue, its connection is shut so that the worker stops reading."""
        sockets = _Sockets()

        def one(_: int) -> tuple[int, bytes] | Exception:
            try:
                return self._exchange(path, params, sockets)
            except Exception as e:  # a pool job returns its error; the waiting thread raises it
                return e

        for done in pool.bounded([0], one, 1, lambda _: self.timeout_s, "nodeagent-prometheus"):
            if isinstance(done.outcome, pool.Overdue):
                sockets.shut()
                raise self._unreachable(self._late())
            if isinstance(done.outcome, Exception):
                raise done.outcome
            return done.outcome
        raise AssertionError("the pool gave no outcome")  # bounded yields one per item

    def _exchange(self, path: str, params: Mapping[str, str], sockets: _Sockets) -> tuple[int, bytes]:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        headers = {"Accept": "application/json", "User-Agent": f"nodeagent/{__version__}"}
        if self.endpoint.authorization is not None:
            headers["Authorization"] = self.endpoint.authorization
        request = urllib.request.Request(url, headers=headers)
        where = f"{self.url}{path}"
        try:
            with _opener(sockets).open(request, timeout=self.timeout_s) as response:
                return response.status, self._read(response, where)
        except urllib.error.HTTPError as e:
            with e:
                if 300 <= e.code < 400:
                    raise self._redirected(where, e.code, e.headers.get("Location")) from None
                return e.code, self._read(e, where)
        except TimeoutError:  # while reading the answer
            raise self._unreachable(self._late()) from None
        except urllib.error.URLError as e:  # while connecting
            late = isinstance(e.reason, TimeoutError)
            raise self._unreachable(self._late() if late else _reason(e.reason)) from None
        except (OSError, http.client.HTTPException) as e:
            raise self._unreachable(_reason(e)) from None

    def _read(self, response: Any, where: str) -> bytes:
        """The answer's body, counted while read (before any parsing, which takes about thirteen
        times its size): one line naming the URL past NODEAGENT_MAX_PROMETHEUS_MIB."""
        try:
            return limits.read_capped(response.read1, _MAX_ANSWER)
        except limits.TooLarge as e:
            raise PrometheusUnavailable(
                f"{where} answered {e}: narrow the fleet with --selector, or raise the limit"
            ) from None

    def _redirected(self, where: str, status: int, location: str | None) -> PrometheusUnavailable:
        target = repr(urllib.parse.urljoin(where, location)[:_ERROR_TEXT]) if location else "nowhere"
        return PrometheusUnavailable(
            f"{where} answered HTTP {status}, a redirect to {target}: not followed (the credentials "
            "would go along to whichever server it names); give Prometheus's own address as --prometheus"
        )

    def _late(self) -> str:
        return f"no answer within {self.timeout_s:g}s (--timeout)"

    def _unreachable(self, reason: str) -> PrometheusUnavailable:
        return PrometheusUnavailable(f"cannot read Prometheus at {self.url}: {reason}")


class _Sockets:
    """The sockets one request opened, shut from another thread at the request's deadline: a
    read blocked on them returns at once (closing would not wake it), and one connected later is
    shut as it connects."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._shut = False

    def opened(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.append(sock)
            if self._shut:
                _shut(sock)

    def shut(self) -> None:
        with self._lock:
            self._shut = True
            for sock in self._open:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    # socket.socket's own shutdown, on the descriptor: an SSLSocket's would drop its TLS state under
    # the thread reading. The descriptor stays open while the answer is read (the response holds it)
    # and is -1 once closed (then OSError), so no other socket is ever shut.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _opener(sockets: _Sockets) -> urllib.request.OpenerDirector:
    """urllib's opener (proxies from the environment, as urlopen) whose connections tell `sockets`
    of their socket once connected (through a proxy's tunnel and TLS too), and that follows no
    redirect: a redirect is an answer (HTTPError 3xx). urllib would send the request's headers,
    the Authorization of `user:password@` too, to whatever server the Location names, and over
    plain http after https."""

    class Told(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            sockets.opened(self.sock)

    class ToldTLS(Told, http.client.HTTPSConnection):
        pass

    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Told, req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(ToldTLS, req)  # the default TLS context, as urlopen's

    class NoRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return urllib.request.build_opener(HTTP, HTTPS, NoRedirects)


def _is_answer(raw: Any) -> bool:
    try:
        _Answer.model_validate(raw)
    except ValidationError:
        return False
    return True


def _reason(reason: object) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is Prometheus running there, on that port?)"
    if isinstance(reason, socket.gaierror):
        return f"host name not found ({reason.strerror or reason})"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return " ".join(str(reason).split()) or type(reason).__name__


def _number(text: str, promql: str, url: str) -> float:
    """A sample value as the API writes it ("1", "0.25", "NaN", "+Inf")."""
    try:
        return float(text)
    except ValueError:
        raise PrometheusUnavailable(
            f"{url} answered `{promql}` with the value {text!r}, which is not a number"
        ) from None
