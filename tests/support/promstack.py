"""A real Prometheus and real node_exporters on this machine, for the tests of nodeagent's
Prometheus integration (Debian's prometheus 2.42 and prometheus-node-exporter 1.5).

- one node_exporter per simulated node, with only the textfile collector
  (`--collector.disable-defaults --collector.textfile --collector.textfile.directory=DIR`), its own
  textfile folder and a free port on 127.0.0.1;
- one Prometheus with its own configuration and TSDB folder under the test's folder, on a free
  port of 127.0.0.1, scraping every node each second: one static target per node with the label
  `node` naming it (job `gpu-nodes`), and targets that nothing listens on for nodes whose exporter
  never ran;
- readiness: node_exporter once /metrics answers, Prometheus once /-/ready does and it has
  scraped every exporter once (its scrape manager applies new targets up to 5 s after start).

Everything is a subprocess this module owns, started through `setpriv --pdeathsig KILL` so that it
dies with the test process even when that is killed; `with PromStack(...)` stops it all (SIGTERM,
then SIGKILL) also when the test fails, and an atexit hook stops stacks never closed. Only
loopback is contacted.

`python -m tests.support.promstack record DEST` records the fleet view's answers from a real Prometheus
into DEST (tests/fixtures/prometheus/README.md).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from tests.support.paths import REPO

JOB = "gpu-nodes"
SCRAPE_INTERVAL_S = 1
START_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0

# Recorded machines (tests/fixtures/corpus) whose `nodeagent check` is OK, and FAIL; both run the
# pcie and gpu checks, so one check (gpu) goes from OK to FAIL when a node's file is replaced.
OK_MACHINE = "smi-telegraf-rtx-3060"
FAIL_MACHINE = "smi-openpai-v100-sxm3-dbe-retired-pages"


def _which(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name) or next(
            (str(p) for d in ("/usr/bin", "/usr/sbin") if (p := Path(d, name)).is_file()), None
        )
        if found:
            return found
    return None


NODE_EXPORTER = _which("prometheus-node-exporter", "node_exporter")
PROMETHEUS = _which("prometheus")
PROMTOOL = _which("promtool")
SETPRIV = _which("setpriv")


def missing() -> str | None:
    """Why the real stack cannot run here (None when it can)."""
    for tool, package in (
        (NODE_EXPORTER, "prometheus-node-exporter"),
        (PROMETHEUS, "prometheus"),
        (PROMTOOL, "prometheus"),
    ):
        if tool is None:
            return f"{package} is not installed (`make test` installs it as root)"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET `url` without any proxy (only loopback is contacted): the status and the body."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read()


def wait_until(what: str, probe: Callable[[], Any], timeout: float, poll: float = 0.2) -> Any:
    """`probe()`'s first true value within `timeout` seconds; AssertionError naming `what` else."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except (OSError, ValueError) as e:
            last = e
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s (last: {last!r})")
        time.sleep(poll)


# --- one daemon ---------------------------------------------------------------------------------


@dataclass
class Daemon:
    """A subprocess with its output in a log file."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        wrapper = [SETPRIV, "--pdeathsig", "KILL"] if SETPRIV else []
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*wrapper, *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C goes to pytest, which stops us
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, url: str, timeout: float = START_TIMEOUT_S) -> None:
        def ready() -> bool:
            if not self.running():
                raise AssertionError(f"{self.name} exited {self.exit_code()}:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                return http_get(url, timeout=2.0)[0] == 200
            return False

        try:
            wait_until(f"{self.name} ready at {url}", ready, timeout, poll=0.1)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.log_tail()}") from None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_GRACE_S)


# --- the stack ----------------------------------------------------------------------------------


@dataclass
class Exporter:
    """One node's node_exporter: its textfile folder and port."""

    node: str
    folder: Path
    port: int
    daemon: Daemon

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def prom(self) -> Path:
        """The file nodeagent writes for this node."""
        return self.folder / "nodeagent.prom"

    def scrape(self) -> str:
        status, body = http_get(f"http://{self.address}/metrics")
        assert status == 200, f"node_exporter of {self.node}: HTTP {status}"
        return body.decode()

    def stop(self) -> None:
        self.daemon.stop()


@dataclass
class PromStack:
    """node_exporters for `nodes`, targets nothing listens on for `silent` nodes, one Prometheus."""

    workdir: Path
    nodes: Sequence[str]
    silent: Sequence[str] = ()
    exporters: dict[str, Exporter] = field(default_factory=dict)
    silent_ports: dict[str, int] = field(default_factory=dict)
    prometheus: Daemon | None = None
    port: int = 0

    def __enter__(self) -> PromStack:
        _stacks[id(self)] = self
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            self.exporters[node] = self._start_exporter(node)
        for node in self.silent:
            self.silent_ports[node] = free_port()
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        self.prometheus = self._start_prometheus(config)

    def config(self) -> dict[str, Any]:
        addresses = {name: e.address for name, e in self.exporters.items()}
        addresses |= {name: f"127.0.0.1:{port}" for name, port in self.silent_ports.items()}
        targets = [{"targets": [address], "labels": {"node": name}} for name, address in addresses.items()]
        return {
            "global": {
                "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                "scrape_timeout": f"{SCRAPE_INTERVAL_S}s",
                "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
            },
            "scrape_configs": [{"job_name": JOB, "static_configs": targets}],
        }

    @staticmethod
    def textfile(workdir: Path, node: str) -> Path:
        """The file nodeagent writes for `node`, in its exporter's textfile folder (made here, so
        that it can be written before the stack starts)."""
        folder = workdir / "textfile" / node
        folder.mkdir(parents=True, exist_ok=True)
        return folder / "nodeagent.prom"

    def _start_exporter(self, node: str) -> Exporter:
        folder = self.textfile(self.workdir, node).parent
        assert NODE_EXPORTER is not None
        for _attempt in range(3):  # a free port may be taken between the probe and the bind
            port = free_port()
            daemon = Daemon(
                f"node_exporter of {node}",
                [
                    NODE_EXPORTER,
                    "--collector.disable-defaults",
                    "--collector.textfile",
                    f"--collector.textfile.directory={folder}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                self.workdir / f"node_exporter-{node}.log",
            )
            daemon.start()
            exporter = Exporter(node, folder, port, daemon)
            self.exporters[node] = exporter
            try:
                daemon.wait_ready(f"http://{exporter.address}/metrics")
            except AssertionError:
                if "address already in use" not in daemon.log_tail():
                    raise
                daemon.stop()
                continue
            return exporter
        raise AssertionError(f"node_exporter of {node}: no free port after 3 attempts")

    def _start_prometheus(self, config: Path) -> Daemon:
        assert PROMETHEUS is not None
        for _attempt in range(3):
            self.port = free_port()
            daemon = Daemon(
                "prometheus",
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                self.workdir / "prometheus.log",
            )
            self.prometheus = daemon
            daemon.start()
            try:
                daemon.wait_ready(f"{self.url}/-/ready")
            except AssertionError:
                if "address already in use" not in daemon.log_tail():
                    raise
                daemon.stop()
                continue
            return daemon
        raise AssertionError("prometheus: no free port after 3 attempts")

    def close(self) -> None:
        daemons = [*(e.daemon for e in self.exporters.values())]
        if self.prometheus is not None:
            daemons.append(self.prometheus)
        for daemon in daemons:
            with contextlib.suppress(Exception):  # stop every one, whatever one of them does
                daemon.stop()
        _stacks.pop(id(self), None)

    # -- asking Prometheus ----------------------------------------------------------------------

    def api(self, path: str, **params: str) -> Any:
        status, body = http_get(f"{self.url}{path}?{urllib.parse.urlencode(params)}")
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", f"{path} {params}: HTTP {status} {answer}"
        return answer["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector of `promql` now: [{"metric": {...}, "value": [t, "v"]}, ...]."""
        data = self.api("/api/v1/query", query=promql)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def values(self, promql: str, label: str) -> dict[str, float]:
        """`label` -> value of each series of `promql`."""
        return {s["metric"][label]: float(s["value"][1]) for s in self.query(promql)}

    def wait_for(
        self, promql: str, test: Callable[[list[dict[str, Any]]], bool], timeout: float = 20.0
    ) -> Any:
        return wait_until(f"`{promql}`", lambda: (r := self.query(promql)) and test(r) and r, timeout)

    def wait_scraped(self, nodes: Sequence[str], timeout: float = 20.0) -> None:
        """Until Prometheus holds nodeagent's run status of each of `nodes`."""
        want = set(nodes)
        self.wait_for(
            f'nodeagent_run_status{{job="{JOB}"}}',
            lambda r: want <= {s["metric"].get("node") for s in r},
            timeout,
        )

    def stop_exporter(self, node: str, timeout: float = 20.0) -> None:
        """Stop `node`'s exporter and wait until Prometheus sees its target down."""
        self.exporters[node].stop()
        self.wait_for(f'up{{node="{node}"}} == 0', bool, timeout)


_stacks: dict[int, PromStack] = {}


@atexit.register
def _close_forgotten_stacks() -> None:
    for stack in list(_stacks.values()):
        stack.close()


# --- nodeagent writing the files ----------------------------------------------------------------


def named_root(machine: str, name: str, workdir: Path) -> Path:
    """A recorded machine's tree under the name `name` (nodeagent names a --root folder's host
    after the folder): the `host` label of its metrics."""
    from tests.support import fakefleet

    tree = Path(fakefleet.recorded_root(machine, workdir / "trees"))
    link = workdir / "roots" / machine / name
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(tree)
    return link


NODEAGENT = [sys.executable, "-m", "nodeagent"]


def nodeagent_check(root: Path, prom: Path) -> dict[str, Any]:
    """`nodeagent check --root ROOT --format json --output prometheus:PROM`, the real command in a
    process of its own; the JSON report it printed."""
    out = subprocess.run(
        [*NODEAGENT, "check", "--root", str(root), "--format", "json", "--output", f"prometheus:{prom}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    assert out.returncode in (0, 1, 2, 3), f"nodeagent check exited {out.returncode}: {out.stderr}"
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def write_as_of(doc: Mapping[str, Any], prom: Path, started: float) -> dict[str, Any]:
    """`doc` as if its run had started at `started` (a node whose nodeagent stopped running),
    written to `prom` by nodeagent's renderer, replacing the file whole."""
    from nodeagent.render.prometheus import prometheus

    old = {**doc, "started": started}
    tmp = prom.with_name(f".{prom.name}.tmp")
    tmp.write_text(prometheus(old))
    os.replace(tmp, prom)
    return old


# --- the fleet scenario (the slow fleet test, and the recording) -------------------------------

STALE_AGE_S = 3600.0  # n3's last run: an hour before the stack started

# node -> (recorded machine, what happens to it)
FLEET = {
    "n1": (OK_MACHINE, "fresh"),
    "n2": (FAIL_MACHINE, "fresh"),
    "n3": (OK_MACHINE, "stale"),
    "n4": (FAIL_MACHINE, "exporter stopped after it was scraped"),
}
NEVER_UP = "n5"  # a target nothing ever listened on


@dataclass
class FleetScenario:
    stack: PromStack
    docs: dict[str, dict[str, Any]]  # node -> the report its metrics were written from


@contextlib.contextmanager
def fleet_scenario(workdir: Path) -> Iterator[FleetScenario]:
    """The four nodes of FLEET and the target of NEVER_UP, as Prometheus sees them once n4's
    exporter is down."""
    docs: dict[str, dict[str, Any]] = {}
    for node, (machine, what) in FLEET.items():
        prom = PromStack.textfile(workdir, node)
        doc = nodeagent_check(named_root(machine, node, workdir), prom)
        if what == "stale":
            doc = write_as_of(doc, prom, time.time() - STALE_AGE_S)
        docs[node] = doc
    with PromStack(workdir, list(FLEET), silent=[NEVER_UP]) as stack:
        stack.wait_scraped(list(FLEET))
        stack.stop_exporter("n4")
        yield FleetScenario(stack, docs)


# The views recorded: the whole fleet, the job's targets, and a selector Prometheus refuses (its
# regular expression does not compile) while nodeagent's check of the matchers' syntax passes it.
RECORDED_SELECTORS = (None, f'{{job="{JOB}"}}', 'job=~"("')


def record(dest: Path) -> None:
    """Record the fleet view's answers from a real Prometheus (fleet_scenario) into `dest`."""
    import tempfile

    from nodeagent.cluster import prometheus_view as prometheus_fleet
    from nodeagent.cluster.prometheus import Client

    exchanges: list[dict[str, Any]] = []  # of the view being recorded

    class Recording(Client):
        def get(self, path: str, params: Mapping[str, str]) -> tuple[int, bytes]:
            status, body = super().get(path, params)
            exchanges.append(
                {"path": path, "params": dict(params), "status": status, "body": json.loads(body)}
            )
            return status, body

    with tempfile.TemporaryDirectory(prefix="promstack-") as tmp, fleet_scenario(Path(tmp)) as scenario:
        views = []
        for selector in RECORDED_SELECTORS:
            exchanges.clear()
            request = prometheus_fleet.PrometheusFleetRequest(scenario.stack.url, selector)
            with contextlib.suppress(Exception):  # the refused selector is recorded too
                prometheus_fleet.run(request, Recording(scenario.stack.url))
            views.append({"selector": selector, "exchanges": list(exchanges)})
        recording = {
            "recorded_with": "python -m tests.support.promstack record tests/fixtures/prometheus",
            "prometheus": _version(PROMETHEUS),
            "node_exporter": _version(NODE_EXPORTER),
            "url": scenario.stack.url,
            "nodes": {n: {"machine": m, "case": w} for n, (m, w) in FLEET.items()}
            | {NEVER_UP: {"machine": None, "case": "no exporter ever listened"}},
            "reports": scenario.docs,
            "views": views,
        }
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "fleet.json").write_text(json.dumps(recording, indent=1) + "\n")


def _version(tool: str | None) -> str:
    if tool is None:
        return "?"
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else "?"


# --- replaying a recording ----------------------------------------------------------------------


@contextlib.contextmanager
def serving(handle: Callable[[Any], None], address: str = "127.0.0.1") -> Iterator[str]:
    """A local HTTP server on `address` (a loopback address) whose GET is `handle(request_handler)`;
    yields its URL."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            handle(self)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer((address, 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://{address}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def replay(exchanges: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering each recorded request (one view of a recording) with
    its recorded answer, and any other with a 404 and a Prometheus-style error; yields its URL."""
    answers = {_request_key(e["path"], e["params"]): (e["status"], e["body"]) for e in exchanges}

    def handle(h: Any) -> None:
        url = urllib.parse.urlsplit(h.path)
        params = dict(urllib.parse.parse_qsl(url.query))
        status, body = answers.get(
            _request_key(url.path, params),
            (404, {"status": "error", "errorType": "not_recorded", "error": f"{url.path} {params}"}),
        )
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    with serving(handle) as url:
        yield url


# One series as the API writes it in an instant vector, about as long as nodeagent's own.
_FLOOD_SAMPLE = (
    b'{"metric":{"__name__":"nodeagent_check_status","check":"gpu","host":"node-00001",'
    b'"instance":"10.0.0.1:9100","job":"gpu-nodes"},"value":[1700000000,"0"]}'
)


def flood_body(size: int, piece: int = 1 << 20) -> tuple[int, Iterator[bytes]]:
    """A valid answer of an instant query about `size` bytes long (whole pieces of `piece` bytes of
    series, so at least one piece) as its exact length and an iterator of its parts: generated
    while sent, never held whole."""
    prefix = b'{"status":"success","data":{"resultType":"vector","result":['
    suffix = _FLOOD_SAMPLE + b"]}}"
    sample = _FLOOD_SAMPLE + b","
    block = sample * (piece // len(sample))
    count = max(1, (size - len(prefix) - len(suffix)) // len(block))

    def parts() -> Iterator[bytes]:
        yield prefix
        for _ in range(count):
            yield block
        yield suffix

    return len(prefix) + count * len(block) + len(suffix), parts()


@contextlib.contextmanager
def flood(size: int) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering the query `time()` and the targets (none) as
    Prometheus does and every other query with a valid answer of about `size` bytes (flood_body),
    sent as fast as the client reads it; yields its URL. A client that stops reading ends the
    answer (its connection closed)."""

    def handle(h: Any) -> None:
        url = urllib.parse.urlsplit(h.path)
        now = f"{time.time():.3f}"
        small = {
            "time()": {"resultType": "scalar", "result": [float(now), now]},
            "targets": {"activeTargets": []},
        }
        what = (
            "targets" if url.path == "/api/v1/targets" else dict(urllib.parse.parse_qsl(url.query))["query"]
        )
        if what in small:
            body = json.dumps({"status": "success", "data": small[what]}).encode()
            length, parts = len(body), iter([body])
        else:
            length, parts = flood_body(size)
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(length))
        h.end_headers()
        with contextlib.suppress(OSError):  # the client hung up: what a cap does
            for part in parts:
                h.wfile.write(part)

    with serving(handle) as url:
        yield url


def _request_key(path: str, params: Mapping[str, str]) -> str:
    return json.dumps([path, sorted(params.items())])


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record":
        sys.exit("usage: python -m tests.support.promstack record DEST_FOLDER")
    reason = missing()
    if reason:
        sys.exit(reason)
    record(Path(sys.argv[2]))
