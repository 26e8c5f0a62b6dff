"""A real nginx (Debian ``nginx-light``) reverse proxy on an ephemeral loopback port.

``start_nginx(upstream, buffering=True, workdir=tmp)`` writes a config under
``workdir`` and runs ``/usr/sbin/nginx -p TMP -c TMP/nginx.conf -g 'daemon off;'``
in the foreground; ``NginxProxy.url`` is where to send requests, ``stop()``
ends it.  The tests' ``nginx_proxy`` fixture (``tests/fixtures/nginx.py``) is a
factory over it that stops every proxy it started.

What buffers, measured here with nginx 1.22: with ``proxy_buffering on`` nginx
still forwards each chunk of a *chunked* upstream response (uvicorn's, so the
bundled server's and Gradio's) as soon as it has it; the stream is held when a
body filter buffers it — ``gzip`` for ``text/event-stream``, common in
production configs (``gzip=True``, the default here) — until the response ends.
``proxy_buffering off`` (or the upstream's ``X-Accel-Buffering: no``) makes
nginx flush every read, which defeats that, so the same config streams.  With
``buffering=True`` nginx ignores the bundled server's ``X-Accel-Buffering: no``,
as a proxy that strips or overrides it would.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

NGINX = os.environ.get("LLMLOAD_NGINX", "/usr/sbin/nginx")

CONF = """\
{user}worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp/client_body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    upstream target {{
        server {upstream};
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{port};
        location {location} {{
            proxy_pass http://target{strip};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_read_timeout 300s;
            proxy_buffering {buffering};
{ignore}{gzip}        }}
    }}
}}
"""


GZIP = """\
            gzip on;
            gzip_proxied any;
            gzip_min_length 1;
            gzip_types text/plain application/json text/event-stream;
"""


@dataclass
class NginxProxy:
    """A running nginx: ``url`` (``http://127.0.0.1:PORT``), its ``prefix`` dir and process."""

    url: str
    prefix: Path
    proc: subprocess.Popen[bytes]
    buffering: bool

    def error_log(self) -> str:
        """nginx's error log so far (for assertion messages)."""
        path = self.prefix / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, timeout: float = 10.0) -> None:
        """Fast shutdown (SIGTERM), SIGKILL if it lingers; idempotent."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def nginx_available() -> bool:
    """Whether the nginx binary is installed (``make system-deps`` installs it)."""
    return os.access(NGINX, os.X_OK) or shutil.which("nginx") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def start_nginx(
    upstream: str,
    *,
    buffering: bool,
    workdir: Path,
    gzip: bool = True,
    location: str = "/",
    ready_timeout: float = 15.0,
) -> NginxProxy:
    """Proxy ``upstream`` (``http://host:port``) through a fresh nginx; running when returned.

    ``location`` (``/llm/``) serves the upstream under that prefix only, stripped
    before it is passed on (``/llm/v1/models`` -> ``/v1/models``); elsewhere 404.
    """
    if not (location.startswith("/") and location.endswith("/")):
        raise ValueError(f"location must start and end with '/', got {location!r}")
    parts = urlsplit(upstream)
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
    binary = NGINX if os.access(NGINX, os.X_OK) else (shutil.which("nginx") or NGINX)
    last = ""
    for _attempt in range(3):  # the free port may be taken between probe and bind
        prefix = Path(workdir) / f"nginx-{time.monotonic_ns()}"
        (prefix / "tmp").mkdir(parents=True)
        port = _free_port()
        conf = CONF.format(
            user="user root;\n" if os.geteuid() == 0 else "",
            prefix=prefix,
            upstream=f"{parts.hostname}:{parts.port}",
            port=port,
            location=location,
            strip="" if location == "/" else "/",
            buffering="on" if buffering else "off",
            ignore="            proxy_ignore_headers X-Accel-Buffering;\n" if buffering else "",
            gzip=GZIP if gzip else "",
        )
        (prefix / "nginx.conf").write_text(conf)
        cmd = [
            binary,
            "-p",
            str(prefix),
            "-e",
            str(prefix / "error.log"),
            "-c",
            str(prefix / "nginx.conf"),
            "-g",
            "daemon off;",
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        proxy = NginxProxy(f"http://127.0.0.1:{port}", prefix, proc, buffering)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline and proc.poll() is None and not _listening(port):
            time.sleep(0.02)
        if proc.poll() is None and _listening(port):
            return proxy
        proxy.stop()
        stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        last = stderr + proxy.error_log()
        if "Address already in use" not in last:
            break
    raise RuntimeError(f"nginx did not start: {last.strip()[-2000:]}")
