"""``python -m bench [NAME ...]``: run the benchmarks (all, or the named ones)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

#: name -> module with ``main(argv) -> int``; order matters (cheap first).
BENCHES: dict[str, str] = {
    "timing-core": "bench.timing_core",
    "gate": "bench.gate_accuracy",
    "gate-grouped": "bench.gate_grouped",
    "gate-history": "bench.gate_history",
    "gate-paired": "bench.gate_paired",
    "run-drift": "bench.run_drift",
    "replay": "bench.replay",
    "steady": "bench.steady",
    "harness": "bench.harness",
    "server": "bench.server_timing",
    "streams": "bench.streams",
    "exporter": "bench.exporter",
    "server-scrape": "bench.server_scrape",
    "vllm-cpu": "bench.vllm_cpu",
    "vllm-apis": "bench.vllm_apis",
    "reliability": "bench.reliability",
    "model": "bench.model",
    "engine-process": "bench.engine_process",
    "capacity": "bench.capacity",
    "scale": "bench.scale",
    "open-streams": "bench.scale.streams",
    "records": "bench.records",
    "flamegraphs": "bench.flamegraphs",
}


#: sections that need something outside the repository (vLLM's own venv): run when named,
#: or when what they need is given (the flag or its variable); else skipped, saying so
NEEDS: dict[str, tuple[str, str]] = {
    name: ("--vllm-python", "LLMLOAD_VLLM_PYTHON") for name in ("vllm-cpu", "vllm-apis")
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"subset of: {', '.join(BENCHES)}")
    args, rest = parser.parse_known_args(argv)
    names = args.names or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    failed = 0
    for name in names:
        flag, env = NEEDS.get(name, ("", ""))
        if flag and not args.names and flag not in rest and not os.environ.get(env):
            print(f"== bench {name}: skipped (needs {flag} PY or ${env}; name it to run it)")
            continue
        t0 = time.monotonic()
        print(f"== bench {name}", flush=True)
        rc = importlib.import_module(BENCHES[name]).main(rest)
        print(f"== bench {name}: rc={rc} in {time.monotonic() - t0:.0f}s", flush=True)
        failed += rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
