"""``llmload dashboards build|check|push``: generate, verify, and publish the dashboards."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmload.dashboards import build as builder
from llmload.dashboards import validate
from llmload.dashboards.grafana import TOKEN_ENV, credential_from_env
from llmload.loadtests.redact import redact_url


def _check(out_dir: Path) -> int:
    failed = False
    for d in builder.DASHBOARDS:
        for problem in validate.problems(d.build(), d.phase_tag):
            print(f"{d.filename}: {problem}", file=sys.stderr)
            failed = True
    stale = builder.drift(out_dir)
    for path in stale:
        print(
            f"{path}: differs from the code; run `python -m llmload.dashboards build`",
            file=sys.stderr,
        )
    if failed or stale:
        return 1
    print(f"dashboards: {len(builder.DASHBOARDS)} up to date and valid")
    return 0


def _push(url: str, folder_uid: str | None, timeout: float) -> int:
    from llmload.dashboards.grafana import connect_from_env
    from llmload.dashboards.push import push

    if credential_from_env() is None:
        print(
            f"dashboards push: no credential; set {TOKEN_ENV} (or GRAFANA_USER and "
            "GRAFANA_PASSWORD) in the environment",
            file=sys.stderr,
        )
        return 2
    try:
        responses = push(connect_from_env(url, timeout=timeout), folder_uid)
    except Exception as exc:
        print(
            f"dashboards push to {redact_url(url)} failed: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    for resp in responses:
        print(f"pushed {resp.get('uid')} version {resp.get('version')}: {resp.get('url')}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="llmload dashboards", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("build", "write the JSON"), ("check", "fail on drift or bad structure")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--out", type=Path, default=builder.JSON_DIR, help="JSON directory")
    p = sub.add_parser("push", help="create/update the dashboards in a Grafana")
    p.add_argument("--grafana-url", required=True, help="e.g. http://127.0.0.1:3000")
    p.add_argument("--folder-uid", default=None, help="Grafana folder uid (default: General)")
    p.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout, seconds")
    args = parser.parse_args(argv)
    if args.command == "build":
        for path in builder.build(args.out):
            print(f"wrote {path}")
        return 0
    if args.command == "check":
        return _check(args.out)
    return _push(args.grafana_url, args.folder_uid, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
