"""`nodeagent fleet --prometheus URL`: the fleet view from the metrics Prometheus holds.

- Against a real Prometheus (slow): four nodes whose files the real `nodeagent check` wrote from
  recorded machines (OK, FAIL, stale, exporter stopped) and a target nothing listens on
  (tests/support/promstack.py, fleet_scenario).
- On the answers recorded from that Prometheus (tests/fixtures/prometheus/fleet.json), replayed by
  a local HTTP server: the same view in a fraction of a second, and every error path.
- The flow's pure parts on the series nodeagent's own renderer writes.

Every expected status comes from the JSON report of the node's run, or from the recorded
answers; none is written here.
"""

from __future__ import annotations

import http.server
import json
import math
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.api.report import FleetDocument, parse_document
from nodeagent.cli import fleet as fleet_cli
from nodeagent.cluster import prometheus_view as pf
from nodeagent.cluster.prometheus import Endpoint, Sample, Target, selector_matchers
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Status
from nodeagent.render.prometheus import prometheus
from tests.support import promstack
from tests.support.cli import RunCli
from tests.support.paths import FIXTURES, REPO

RECORDING = json.loads((FIXTURES / "prometheus" / "fleet.json").read_text())
REPORTS: dict[str, dict[str, Any]] = RECORDING["reports"]
ALL, JOB_SELECTOR, REFUSED = RECORDING["views"]
EX_UNAVAILABLE = 69
EX_USAGE = 64


def view(run_cli: RunCli, url: str, *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run_cli("fleet", "--prometheus", url, "--format", "json", *args)
    assert code in (0, 1, 2, 3), err
    doc: dict[str, Any] = json.loads(out)
    return code, doc


def answer(exchanges: list[dict[str, Any]], path: str, query: str | None = None) -> Any:
    """The recorded answer's data to `path` (and `query`)."""
    for e in exchanges:
        if e["path"] == path and (query is None or e["params"].get("query") == query):
            return e["body"]["data"]
    raise AssertionError(f"{path} {query} was not recorded")


def evaluated_at(exchanges: list[dict[str, Any]]) -> float:
    return float(answer(exchanges, "/api/v1/query", "time()")["result"][1])


def instance_of(exchanges: list[dict[str, Any]], node: str) -> str:
    targets = answer(exchanges, "/api/v1/targets")["activeTargets"]
    (found,) = [t for t in targets if t["labels"]["node"] == node]
    return str(found["labels"]["instance"])


def target_of(exchanges: list[dict[str, Any]], node: str) -> dict[str, Any]:
    targets = answer(exchanges, "/api/v1/targets")["activeTargets"]
    (found,) = [t for t in targets if t["labels"]["node"] == node]
    return dict(found)


def check_statuses(doc: Mapping[str, Any]) -> dict[str, str]:
    return {c["id"]: c["status"] for c in doc["checks"]}


def attention_counts(doc: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """check -> status -> count of the report's findings that need attention."""
    out: dict[str, dict[str, int]] = {}
    for f in doc["findings"]:
        if f["status"] in ("WARN", "UNKNOWN", "FAIL"):
            counts = out.setdefault(f["check_id"], {})
            counts[f["status"]] = counts.get(f["status"], 0) + 1
    return out


def shown_counts(host_doc: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """The same, from the fleet view's findings' evidence (nodeagent_findings{check, status})."""
    out: dict[str, dict[str, int]] = {}
    for f in host_doc["findings"]:
        for key, value in f["evidence"].items():
            if key.startswith("nodeagent_findings{"):
                labels = dict(part.split("=") for part in key[len("nodeagent_findings{") : -1].split(","))
                out.setdefault(labels["check"].strip('"'), {})[labels["status"].strip('"')] = int(value)
    return out


def assert_view_of_the_scenario(
    doc: dict[str, Any], reports: Mapping[str, Any], instances: Mapping[str, str]
) -> None:
    """What the four nodes of promstack.FLEET must look like, from their reports."""
    hosts = doc["hosts"]
    assert set(hosts) >= set(promstack.FLEET)
    for node in ("n1", "n2"):  # fresh: the run's own verdict, check by check
        assert hosts[node]["seen"] == pf.FRESH
        assert hosts[node]["status"] == reports[node]["status"]
        assert check_statuses(hosts[node]) == check_statuses(reports[node])
        assert shown_counts(hosts[node]) == attention_counts(reports[node])
        assert hosts[node]["started"] == reports[node]["started"]
    assert (hosts["n1"]["status"], hosts["n2"]["status"]) == ("OK", "FAIL")  # the scenario holds

    stale = hosts["n3"]
    assert (stale["status"], stale["seen"], stale["last_status"]) == (
        "UNKNOWN",
        pf.STALE,
        reports["n3"]["status"],
    )
    assert stale["checks"] == []  # its old checks are not passed on as the node's state
    (why,) = stale["findings"]
    assert pf.age_text(stale["age_s"]) in why["summary"] and "--stale-after" in why["summary"]
    assert stale["age_s"] >= promstack.STALE_AGE_S

    down = hosts["n4"]
    assert (down["status"], down["seen"], down["last_status"]) == (
        "UNKNOWN",
        pf.TARGET_DOWN,
        reports["n4"]["status"],
    )
    assert down["target"]["health"] == "down" and down["target"]["instance"] == instances["n4"]
    (why,) = down["findings"]
    assert instances["n4"] in why["summary"] and down["target"]["last_error"] in why["summary"]
    assert "connection refused" in down["target"]["last_error"]

    assert doc["status"] == "FAIL"  # the worst: n2's FAIL, not the UNKNOWNs
    assert doc["prometheus"]["nodes"][pf.FRESH] == 2
    assert [d["key"] for d in doc["drift"]] == ["check.gpu.status"]  # n1 OK, n2 FAIL: the fresh ones
    parse_document(doc, "fleet --prometheus")  # a fleet document as `check --cluster` writes one


# --- a real Prometheus --------------------------------------------------------------------------

REASON = promstack.missing()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[promstack.FleetScenario]:
    with promstack.fleet_scenario(tmp_path_factory.mktemp("fleet")) as s:
        yield s


def _fleet(url: str, *args: str) -> tuple[int, str, str]:
    import subprocess

    out = subprocess.run(
        [*promstack.NODEAGENT, "fleet", "--prometheus", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "NO_PROXY": "127.0.0.1"},
    )
    return out.returncode, out.stdout, out.stderr


real = [
    pytest.mark.slow,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
    pytest.mark.xdist_group(name="prometheus-fleet"),
]


def real_prometheus(test: Any) -> Any:
    for mark in real:
        test = mark(test)
    return test


@real_prometheus
def test_the_view_of_a_real_prometheus(scenario: promstack.FleetScenario) -> None:
    stack = scenario.stack
    code, out, err = _fleet(stack.url, "--format", "json")
    doc = json.loads(out)
    instances = {node: e.address for node, e in stack.exporters.items()}
    assert_view_of_the_scenario(doc, scenario.docs, instances)
    assert set(doc["hosts"]) == set(promstack.FLEET)  # n5 never reported: not a node without a selector
    assert code == Status.FAIL.exit_code, err
    assert err == ""


@real_prometheus
def test_a_selector_makes_every_target_a_node(scenario: promstack.FleetScenario) -> None:
    stack = scenario.stack
    code, out, _ = _fleet(stack.url, "--format", "json", "--selector", f'{{job="{promstack.JOB}"}}')
    doc = json.loads(out)
    silent = f"127.0.0.1:{stack.silent_ports[promstack.NEVER_UP]}"
    assert set(doc["hosts"]) == {*promstack.FLEET, silent}
    never = doc["hosts"][silent]
    assert (never["status"], never["seen"]) == ("UNKNOWN", pf.TARGET_DOWN)
    assert "no nodeagent run seen" in never["findings"][0]["summary"]
    assert doc["prometheus"]["selector"] == f'{{job="{promstack.JOB}"}}'
    assert code == Status.FAIL.exit_code
    # A selector that matches nothing: no node to judge is not a fleet that is all OK.
    code, out, err = _fleet(stack.url, "--format", "json", "--selector", 'job="no-such-job"')
    assert (code, out) == (EX_USAGE, "")
    assert 'no nodeagent metrics matching {job="no-such-job"}' in err and err.count("\n") == 1


@real_prometheus
def test_the_table_names_each_node_and_why(scenario: promstack.FleetScenario) -> None:
    code, out, err = _fleet(scenario.stack.url)
    assert code == Status.FAIL.exit_code, err
    # Piped: each host's problems a line each (host first), then a line per host.
    lines = out.splitlines()
    rows = {line.split("  ")[0]: line for line in lines if "  status: " in line}
    for node, status in (("n1", "OK"), ("n2", "FAIL"), ("n3", "UNKNOWN"), ("n4", "UNKNOWN")):
        assert f"  status: {status}  " in rows[node], out
    assert any(line.startswith("n3: UNKNOWN ") and "--stale-after" in line for line in lines), out
    assert "connection refused" in out
    assert f"from Prometheus {scenario.stack.url} at " in out and "1 stale, 1 target down" in out


@real_prometheus
def test_a_longer_stale_after_takes_the_old_run(scenario: promstack.FleetScenario) -> None:
    _, out, _ = _fleet(
        scenario.stack.url, "--format", "json", "--stale-after", str(2 * promstack.STALE_AGE_S)
    )
    stale = json.loads(out)["hosts"]["n3"]
    assert (stale["seen"], stale["status"]) == (pf.FRESH, scenario.docs["n3"]["status"])


# --- the recorded answers -----------------------------------------------------------------------


@pytest.fixture
def recorded() -> Iterator[str]:
    with promstack.replay(ALL["exchanges"]) as url:
        yield url


def test_the_recorded_view(run_cli: RunCli, recorded: str) -> None:
    code, doc = view(run_cli, recorded)
    exchanges = ALL["exchanges"]
    instances = {node: instance_of(exchanges, node) for node in promstack.FLEET}
    assert_view_of_the_scenario(doc, REPORTS, instances)
    assert doc["hosts"]["n4"]["target"]["last_error"] == target_of(exchanges, "n4")["lastError"]
    age = evaluated_at(exchanges) - REPORTS["n3"]["started"]
    assert doc["hosts"]["n3"]["age_s"] == pytest.approx(age, abs=1e-3)
    assert doc["prometheus"]["evaluated_at"] == evaluated_at(exchanges)
    assert code == Status.FAIL.exit_code


def test_the_recorded_view_as_a_table(run_cli: RunCli, recorded: str) -> None:
    code, out, _ = run_cli("fleet", "--prometheus", recorded)
    assert code == Status.FAIL.exit_code
    lines = out.splitlines()
    for node in promstack.FLEET:
        assert any(line.startswith(f"{node}  status: ") for line in lines), out
    assert "n2: FAIL    gpu/metrics: " in out
    assert "n3: UNKNOWN prometheus/last run: " in out and "n4: UNKNOWN prometheus/scrape target: " in out


def test_stale_after_decides_at_the_age(run_cli: RunCli, recorded: str) -> None:
    age = evaluated_at(ALL["exchanges"]) - REPORTS["n3"]["started"]
    _, older = view(run_cli, recorded, "--stale-after", f"{age - 1:.3f}")
    _, newer = view(run_cli, recorded, "--stale-after", f"{age + 1:.3f}")
    assert older["hosts"]["n3"]["seen"] == pf.STALE
    assert (newer["hosts"]["n3"]["seen"], newer["hosts"]["n3"]["status"]) == (
        pf.FRESH,
        REPORTS["n3"]["status"],
    )


def test_the_recorded_view_with_a_selector(run_cli: RunCli) -> None:
    exchanges = JOB_SELECTOR["exchanges"]
    never = instance_of(exchanges, promstack.NEVER_UP)
    with promstack.replay(exchanges) as url:
        code, doc = view(run_cli, url, "--selector", JOB_SELECTOR["selector"])
    assert set(doc["hosts"]) == {*promstack.FLEET, never}
    assert (
        doc["hosts"][never]["target"]["last_error"] == target_of(exchanges, promstack.NEVER_UP)["lastError"]
    )
    assert code == Status.FAIL.exit_code


def test_a_query_prometheus_refuses_is_one_line(run_cli: RunCli) -> None:
    exchanges = REFUSED["exchanges"]
    (refusal,) = [e for e in exchanges if e["status"] == 400]
    with promstack.replay(exchanges) as url:
        code, out, err = run_cli("fleet", "--prometheus", url, "--selector", REFUSED["selector"])
    assert code == EX_USAGE and out == ""
    assert err.count("\n") == 1 and refusal["body"]["error"] in err and "Traceback" not in err
    assert refusal["params"]["query"] in err


# --- errors: one line, no traceback -------------------------------------------------------------


def _one_line(err: str) -> None:
    assert err.startswith("nodeagent: error: ") and err.count("\n") == 1 and "Traceback" not in err, err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_prometheus_not_running(run_cli: RunCli) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    code, out, err = run_cli("fleet", "--prometheus", url)
    assert (code, out) == (EX_UNAVAILABLE, "")
    _one_line(err)
    assert url in err and "connection refused" in err


@pytest.mark.parametrize(
    "url", ["ftp://prometheus:9090", "prometheus:9090", "http://", "http://prom:99999", "http://prom/?x=1"]
)
def test_a_url_that_is_not_a_server(run_cli: RunCli, url: str) -> None:
    code, out, err = run_cli("fleet", "--prometheus", url)
    assert (code, out) == (EX_USAGE, "")
    _one_line(err)
    assert repr(url) in err


def test_credentials_in_the_url_go_to_the_header_never_to_a_message(
    run_cli: RunCli,
) -> None:
    endpoint = Endpoint.parse("https://monitor:s3cr%40t@prom.example:9091/prometheus/")
    assert endpoint.base == "https://prom.example:9091/prometheus"
    assert endpoint.authorization == "Basic bW9uaXRvcjpzM2NyQHQ="  # base64 of monitor:s3cr@t
    code, _, err = run_cli("fleet", "--prometheus", f"http://monitor:s3cret@127.0.0.1:{_free_port()}")
    assert code == EX_UNAVAILABLE and "s3cret" not in err and "monitor" not in err


def _reply(status: int, body: bytes, kind: str = "application/json") -> Any:
    def handle(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", kind)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return handle


def test_a_server_that_is_not_prometheus(run_cli: RunCli) -> None:
    with promstack.serving(_reply(200, b"<html><body>Grafana</body></html>", "text/html")) as url:
        code, _, err = run_cli("fleet", "--prometheus", url)
    assert code == EX_UNAVAILABLE
    _one_line(err)
    assert "without JSON" in err and "Grafana" in err


def test_json_that_is_not_prometheus_api(run_cli: RunCli) -> None:
    with promstack.serving(
        _reply(200, b'{"status": "success", "data": {"resultType": "matrix", "result": []}}')
    ) as url:
        code, _, err = run_cli("fleet", "--prometheus", url)
    assert code == EX_UNAVAILABLE
    _one_line(err)
    assert "resultType" in err and url in err


def test_prometheus_that_cannot_answer(run_cli: RunCli) -> None:
    body = b'{"status": "error", "errorType": "unavailable", "error": "TSDB not ready"}'
    with promstack.serving(_reply(503, body)) as url:
        code, _, err = run_cli("fleet", "--prometheus", url)
    assert code == EX_UNAVAILABLE
    _one_line(err)
    assert "TSDB not ready" in err


def test_a_gateway_refusing_in_front_of_prometheus(run_cli: RunCli) -> None:
    with promstack.serving(_reply(401, b'{"message": "Unauthorized"}')) as url:
        code, _, err = run_cli("fleet", "--prometheus", url)
    assert code == EX_UNAVAILABLE
    _one_line(err)
    assert "HTTP 401" in err and "Unauthorized" in err


def test_prometheus_that_does_not_answer_in_time(run_cli: RunCli) -> None:
    release = threading.Event()

    def hang(h: http.server.BaseHTTPRequestHandler) -> None:
        release.wait(10)

    with promstack.serving(hang) as url:
        start = time.monotonic()
        code, _, err = run_cli("fleet", "--prometheus", url, "--timeout", "0.3")
        took = time.monotonic() - start
        release.set()
    assert code == EX_UNAVAILABLE and took < 5
    _one_line(err)
    assert "no answer within 0.3s" in err


# --- what a server can do to the client: redirect it, drip, flood, nest -------------------------


@pytest.mark.parametrize("elsewhere", ["127.0.0.2", "127.0.0.1"], ids=["other address", "other port"])
def test_a_redirect_is_not_followed_so_the_credentials_stay_with_the_server_given(
    run_cli: RunCli, elsewhere: str
) -> None:
    """urllib followed a redirect to whatever host it named and sent `user:password` along."""
    seen: list[str | None] = []  # the Authorization of each request the other server got

    def other(h: http.server.BaseHTTPRequestHandler) -> None:
        seen.append(h.headers.get("Authorization"))
        _reply(200, json.dumps(answer(ALL["exchanges"], "/api/v1/query", "time()")).encode())(h)

    with promstack.serving(other, elsewhere) as there:
        location = f"{there}/api/v1/query?query=time%28%29"

        def redirect(h: http.server.BaseHTTPRequestHandler) -> None:
            h.send_response(302)
            h.send_header("Location", location)
            h.send_header("Content-Length", "0")
            h.end_headers()

        with promstack.serving(redirect) as url:
            with_credentials = url.replace("http://", "http://monitor:s3cret@")
            code, out, err = run_cli("fleet", "--prometheus", with_credentials)
    assert all(auth is None for auth in seen), seen  # never the credentials
    assert seen == []  # nor any request: a redirect is not followed at all
    assert (code, out) == (EX_UNAVAILABLE, "")
    _one_line(err)
    assert f"{url}/api/v1/query" in err and location in err and "HTTP 302" in err
    assert "s3cret" not in err and "monitor" not in err


def _drip(where: str, interval_s: float, count: int, sent: list[int], done: threading.Event) -> Any:
    """A handler that sends its answer's headers (where="headers") or body one byte every
    `interval_s`, `count` bytes, then an end; `sent` gets how many it sent before the client hung up."""

    def handle(h: http.server.BaseHTTPRequestHandler) -> None:
        n = 0
        try:
            h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
            if where == "headers":
                h.wfile.write(b"X-Padding: ")
            else:
                h.wfile.write(b"Content-Length: %d\r\n\r\n" % count)
            for _ in range(count):
                time.sleep(interval_s)
                h.wfile.write(b"x" if where == "headers" else b" ")
                n += 1
            if where == "headers":
                h.wfile.write(b"\r\nContent-Length: 0\r\n\r\n")
        except OSError:  # the client hung up
            pass
        finally:
            h.close_connection = True
            sent.append(n)
            done.set()

    return handle


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_dripping_server_is_cut_at_the_deadline(run_cli: RunCli, where: str) -> None:
    """--timeout bounded each read of the socket, so a server sending a byte at a time, each within
    the timeout, held the fleet view as long as it liked: it is the whole request's deadline."""
    sent: list[int] = []
    done = threading.Event()
    count = 300  # 6 s at 20 ms a byte, far past the 0.5 s deadline
    with promstack.serving(_drip(where, 0.02, count, sent, done)) as url:
        code, out, err = run_cli("fleet", "--prometheus", url, "--timeout", "0.5")
        assert done.wait(30)
    assert (code, out) == (EX_UNAVAILABLE, "")
    _one_line(err)
    assert url in err and "no answer within 0.5s (--timeout)" in err
    (n,) = sent
    assert n < count  # the connection was closed on the server: not read to the end in the background


def test_an_answer_larger_than_the_limit_is_refused_before_parsing(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 120 MB answer was parsed whole (5.8 GB, 271 s) before its size was looked at."""
    monkeypatch.setenv("NODEAGENT_MAX_PROMETHEUS_MIB", "1")
    with promstack.flood(3 * 1024 * 1024) as url:
        code, out, err = run_cli("fleet", "--prometheus", url)
    assert (code, out) == (EX_UNAVAILABLE, "")
    _one_line(err)
    assert f"{url}/api/v1/query" in err and "more than 1 MiB (limit NODEAGENT_MAX_PROMETHEUS_MIB)" in err


def test_an_answer_within_the_limit_is_read(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch, recorded: str
) -> None:
    monkeypatch.setenv("NODEAGENT_MAX_PROMETHEUS_MIB", "1")  # the recorded answers are 24 KiB at most
    code, doc = view(run_cli, recorded)
    assert code == Status.FAIL.exit_code and set(doc["hosts"]) >= set(promstack.FLEET)


def test_an_answer_nested_too_deeply_is_one_line(run_cli: RunCli) -> None:
    with promstack.serving(_reply(200, b"[" * 100_000 + b"]" * 100_000)) as url:
        code, out, err = run_cli("fleet", "--prometheus", url)
    assert (code, out) == (EX_UNAVAILABLE, "")
    _one_line(err)
    assert "nested deeper than 64 levels (limit NODEAGENT_MAX_DEPTH)" in err


@pytest.mark.parametrize(
    "args",
    [
        ["--selector", 'up{job="x"}'],
        ["--selector", "job=x"],
        ["--selector", 'job="x",'],
        ["--selector", '__name__="up"'],
        ["--stale-after", "0"],
        ["--stale-after", "nan"],
        ["--lookback", "60"],
        ["--timeout", "-1"],
    ],
)
def test_bad_options_fail_before_any_request(run_cli: RunCli, args: list[str]) -> None:
    # Nothing listens there: exit 64 (not 69) shows that no request was made.
    code, out, err = run_cli("fleet", "--prometheus", f"http://127.0.0.1:{_free_port()}", *args)
    assert (code, out) == (EX_USAGE, "")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_selector_syntax() -> None:
    assert selector_matchers(None) == selector_matchers("{}") == ""
    assert selector_matchers('{job="gpu-nodes"}') == 'job="gpu-nodes"'
    assert selector_matchers(' job = \'a\' , zone=~"b|c", x!~`d"`') == 'job=\'a\',zone=~"b|c",x!~`d"`'
    assert selector_matchers(r'{path="a\"b,c"}') == r'path="a\"b,c"'
    for bad in ('{job="x"', 'job="x" zone="y"', "job", '1job="x"'):
        with pytest.raises(UsageError, match="--selector"):
            selector_matchers(bad)


def test_the_cli_defaults_are_the_flows() -> None:
    assert fleet_cli.DEFAULT_STALE_AFTER_S == pf.DEFAULT_STALE_AFTER_S
    assert fleet_cli.DEFAULT_LOOKBACK_S == pf.DEFAULT_LOOKBACK_S
    assert fleet_cli.DEFAULT_TIMEOUT_S == pf.DEFAULT_TIMEOUT_S


# --- the flow on series nodeagent's renderer writes ----------------------------------------------


def rendered(doc: Mapping[str, Any], **target: str) -> list[Sample]:
    """`doc` as nodeagent writes it for the textfile collector, read back as Prometheus would hold
    it: each series with the scrape target's labels added."""
    labels = {"job": "gpu-nodes", "instance": "10.0.0.1:9100"} | target
    out = []
    for family in text_string_to_metric_families(prometheus(doc)):
        for s in family.samples:
            out.append(Sample({"__name__": s.name, **s.labels, **labels}, s.value))
    return out


def observed(samples: list[Sample], at: float, **overrides: Any) -> pf.Observed:
    current = [s for s in samples if s.labels["__name__"] != "nodeagent_findings"]
    findings = [s for s in samples if s.labels["__name__"] == "nodeagent_findings" and s.value > 0]
    seen = [
        s
        for s in samples
        if s.labels["__name__"] in ("nodeagent_run_status", "nodeagent_run_timestamp_seconds")
    ]
    fields: dict[str, Any] = {
        "url": "http://prom:9090",
        "matchers": "",
        "at": at,
        "runs": pf.node_runs(current, findings),
        "last_seen": pf.last_seen(
            [s for s in seen if s.labels["__name__"] == "nodeagent_run_status"],
            [s for s in seen if s.labels["__name__"] == "nodeagent_run_timestamp_seconds"],
        ),
        "targets": {},
        "selected": None,
    }
    return pf.Observed(**(fields | overrides))


REQUEST = pf.PrometheusFleetRequest("http://prom:9090")


@pytest.mark.parametrize("node", ["n1", "n2"])
def test_the_renderers_series_read_back_give_the_reports_verdict(node: str) -> None:
    doc = REPORTS[node]
    report = pf.fleet_report(observed(rendered(doc), doc["started"] + 10), REQUEST)
    host = report.to_dict()["hosts"][node]
    assert (host["status"], host["seen"]) == (doc["status"], pf.FRESH)
    assert check_statuses(host) == check_statuses(doc)
    assert shown_counts(host) == attention_counts(doc)
    assert report.exit_code == Status(doc["status"]).exit_code
    for c in host["checks"]:
        (same,) = [d for d in doc["checks"] if d["id"] == c["id"]]
        assert c["duration_s"] == same["duration_s"]


def test_the_age_limit_is_inclusive() -> None:
    doc = REPORTS["n1"]
    limit = REQUEST.stale_after_s
    at_limit = pf.fleet_report(observed(rendered(doc), doc["started"] + limit), REQUEST).to_dict()
    past = pf.fleet_report(observed(rendered(doc), doc["started"] + limit + 1), REQUEST).to_dict()
    assert at_limit["hosts"]["n1"]["seen"] == pf.FRESH
    assert (past["hosts"]["n1"]["seen"], past["hosts"]["n1"]["status"]) == (pf.STALE, "UNKNOWN")


def test_a_run_dated_far_ahead_of_prometheus_is_not_taken() -> None:
    doc = REPORTS["n2"]
    host = pf.fleet_report(
        observed(rendered(doc), doc["started"] - 2 * REQUEST.stale_after_s), REQUEST
    ).to_dict()
    assert (host["hosts"]["n2"]["seen"], host["hosts"]["n2"]["status"]) == (pf.CLOCK, "UNKNOWN")


def test_metrics_gone_while_the_target_answers() -> None:
    doc = REPORTS["n2"]
    samples = rendered(doc)
    target = Target(
        {"job": "gpu-nodes", "instance": "10.0.0.1:9100"}, "up", "", "", "http://10.0.0.1:9100/metrics"
    )
    gone = observed(samples, doc["started"] + 60, runs=[], targets={target.key: target})
    host = pf.fleet_report(gone, REQUEST).to_dict()["hosts"]["n2"]
    assert (host["status"], host["seen"], host["last_status"]) == ("UNKNOWN", pf.GONE, doc["status"])
    assert "10.0.0.1:9100" in host["findings"][0]["summary"]


def test_the_host_label_renamed_by_prometheus() -> None:
    """A target label `host` makes Prometheus keep nodeagent's as `exported_host`."""
    doc = REPORTS["n1"]
    samples = [
        Sample({**s.labels, "host": "rack-3", "exported_host": s.labels["host"]}, s.value)
        for s in rendered(doc)
    ]
    report = pf.fleet_report(observed(samples, doc["started"] + 1), REQUEST).to_dict()
    assert set(report["hosts"]) == {"n1"}


def test_a_host_reporting_through_two_targets_is_shown_once() -> None:
    doc = REPORTS["n1"]
    older = {**doc, "started": doc["started"] - 100, "status": "FAIL"}
    samples = rendered(doc) + rendered(older, instance="10.0.0.2:9100")
    report = pf.fleet_report(observed(samples, doc["started"] + 1), REQUEST).to_dict()
    assert report["hosts"]["n1"]["status"] == doc["status"]  # the newest run
    assert any("10.0.0.2:9100" in note for note in report["notes"])


def test_a_host_a_fleet_run_could_not_reach() -> None:
    """`check --cluster --output prometheus`: the unreachable host has a host error, no run time."""
    sample = [
        Sample({"__name__": "nodeagent_run_status", "host": "n9", "job": "j", "instance": "i"}, 2),
        Sample(
            {
                "__name__": "nodeagent_host_error",
                "host": "n9",
                "kind": "unreachable",
                "job": "j",
                "instance": "i",
            },
            1,
        ),
    ]
    host = pf.fleet_report(observed(sample, 1e9), REQUEST).to_dict()["hosts"]["n9"]
    assert (host["status"], host["seen"]) == ("UNKNOWN", pf.NO_RESULT)
    assert "unreachable" in host["findings"][0]["summary"]


def test_a_status_number_nodeagent_never_writes_is_unknown() -> None:
    doc = REPORTS["n1"]
    samples = [
        Sample(
            s.labels,
            7.0
            if s.labels["__name__"] == "nodeagent_check_status" and s.labels["check"] == "gpu"
            else s.value,
        )
        for s in rendered(doc)
    ]
    host = pf.fleet_report(observed(samples, doc["started"] + 1), REQUEST).to_dict()["hosts"]["n1"]
    assert host["status"] == "UNKNOWN" and check_statuses(host)["gpu"] == "UNKNOWN"


def test_the_document_is_a_fleet_document() -> None:
    doc = pf.fleet_report(observed(rendered(REPORTS["n2"]), REPORTS["n2"]["started"] + 1), REQUEST).to_dict()
    from nodeagent.render import jsonout

    assert isinstance(parse_document(jsonout.document(doc), "fleet"), FleetDocument)
    assert math.isfinite(doc["prometheus"]["evaluated_at"])
