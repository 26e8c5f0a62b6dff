"""``python -m bench server-scrape``: what scraping the target's ``/metrics`` costs the client.

A fresh gevent-patched process (the load generator's world) runs only a
``loadtests.run.scrape.ServerScraper`` at ``--server-metrics-interval 1s`` for
``WINDOW_S`` and reads its own CPU time (``getrusage``): that is the scrape's
cost to the process, HTTP client included.  The same process idling (no
scraper) is measured too and subtracted.  Two targets:

* the bundled server after a few hundred requests on three label sets (chat
  stream and non-stream, completions): its 241-bucket histograms make a
  ``/metrics`` of thousands of lines, the heavy case;
* a vLLM-shaped ``/metrics`` (``tests/fixtures/metrics/vllm-after.txt``, served
  as it is), the common one.

Full scrapes (buckets kept; taken at phase boundaries only, when no request is
in flight) are timed on their own.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

WINDOW_S = 30.0
ROOT = Path(__file__).resolve().parent.parent
VLLM_TEXT = ROOT / "tests" / "fixtures" / "metrics" / "vllm-after.txt"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _child(url: str, scrape: bool) -> dict[str, Any]:
    from gevent import monkey

    monkey.patch_all()
    import gevent

    from llmload.loadtests import serverfamilies
    from llmload.loadtests.run.scrape import ServerScraper

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scraper = ServerScraper(url, Path(tmp), serverfamilies.known_names(), interval_s=1.0)
        if scrape:
            before = _cpu()
            why = scraper.probe()  # one full scrape: the baseline a run takes before its load
            out["full_cpu_ms"] = (_cpu() - before) * 1000
            assert not why, why
            scraper.start()
        gevent.sleep(1.0)
        t0, c0 = time.monotonic(), _cpu()
        gevent.sleep(WINDOW_S)
        out["cpu_s"] = _cpu() - c0
        out["wall_s"] = time.monotonic() - t0
        if scrape:
            out["scrapes"] = scraper.scrapes
            scraper.close()
            lines = sum(1 for _ in (Path(tmp) / "server_metrics.jsonl").open())
            out["file_lines"] = lines
    return out


def _run_child(url: str, scrape: bool) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.server_scrape", "child", url, "1" if scrape else "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WINDOW_S + 60,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class _Static(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        return None


def _populate(url: str) -> None:
    import httpx

    with httpx.Client(base_url=url, timeout=30) as c:
        for i in range(300):
            stream = i % 3 != 0
            if i % 5 == 0:
                body = {"model": "m", "prompt": "hi", "max_tokens": 8, "stream": stream}
                c.post("/v1/completions", json=body).read()
            else:
                body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
                c.post("/v1/chat/completions", json={**body, "stream": stream}).read()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "child":
        print(json.dumps(_child(argv[1], argv[2] == "1")))
        return 0
    import httpx

    from bench.mdsection import load_average, machine, write_section
    from bench.procs import start_server_process

    rows = []
    server = start_server_process("--ttft-ms", "2", "--itl-ms", "1")
    _Static.body = VLLM_TEXT.read_bytes()
    static = ThreadingHTTPServer(("127.0.0.1", 0), _Static)
    threading.Thread(target=static.serve_forever, daemon=True).start()
    load = load_average()
    try:
        _populate(server.url)
        targets = [
            ("the bundled server", server.url + "/metrics"),
            ("vLLM-shaped", f"http://127.0.0.1:{static.server_address[1]}/metrics"),
        ]
        idle = _run_child(targets[1][1], scrape=False)
        for label, url in targets:
            lines = len(httpx.get(url).text.splitlines())
            got = _run_child(url, scrape=True)
            share = (got["cpu_s"] - idle["cpu_s"]) / got["wall_s"]
            per = (got["cpu_s"] - idle["cpu_s"]) / max(got["scrapes"], 1) * 1000
            rows.append(
                f"| {label} | {lines} | {got['scrapes']} | {share * 100:.2f} % | "
                f"{per:.1f} ms | {got['full_cpu_ms']:.0f} ms |"
            )
            print(rows[-1], flush=True)
    finally:
        server.stop()
        static.shutdown()
    body = "\n".join(
        [
            "## Server metrics scrape",
            "",
            "`python -m bench server-scrape`: a gevent process running only the scraper of "
            f"`--server-metrics` at 1 s for {WINDOW_S:g} s, its own CPU time (getrusage, HTTP "
            "client and parse), less the same process idling "
            f"({idle['cpu_s'] / idle['wall_s'] * 100:.2f} % of a core). A full scrape (histogram "
            "buckets) is taken only at phase boundaries, when no request is in flight.",
            "",
            "| target | /metrics lines | scrapes | CPU (share of one core) | CPU per scrape | "
            "one full scrape |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"Machine: {machine()}; load average at start {load}.",
        ]
    )
    write_section("server-scrape", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
