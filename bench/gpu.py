"""``make bench-gpu`` (``python -m bench.gpu``): the transformers engines at 7B scale on a GPU.

A ``Qwen2ForCausalLM`` with Qwen2.5-7B-Instruct's published dimensions and random
bf16 weights (nothing is downloaded) runs inside both engines, in-process:

- TTFT of one request with a 512-token prompt (continuous engine);
- single-stream decode tokens/s against the memory-bandwidth bound
  (weight bytes / bandwidth: every decode step reads every weight once);
- aggregate output tokens/s of 20 concurrent streams, continuous vs none;
- the GPU's energy over the single-stream requests and over the 20 streams, each
  engine: joules per output token, output tokens per joule, mean power.

The GPU's bandwidth comes from a table by device name or ``--bandwidth-gbs``.
Energy is NVML's (``nvidia-ml-py``'s ``pynvml``, the ``gpu`` extra): the GPU's
energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ) read before and
after each measured block, or, on a GPU without that counter, its power draw
sampled every 100 ms on a thread and integrated (``Energy``; the table says which).
It is the whole board's (idle draw included) over the block's wall time.  Without
NVML the energy table says why and the rest is measured as before.  Without CUDA
it measures nothing and exits 2 with a message.  Results go to BENCHMARKS.md
section ``gpu``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmload.reports.server.gpu import integrate  # the report's own: (s, W) -> J

#: Qwen2.5-7B-Instruct config.json (published dimensions)
QWEN25_7B: dict[str, Any] = {
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}

#: peak memory bandwidth, GB/s, by a substring of ``torch.cuda.get_device_name()``
BANDWIDTH_GBS: dict[str, float] = {
    "H200": 4800,
    "H100 SXM": 3350,
    "H100 80GB HBM3": 3350,
    "H100 PCIe": 2000,
    "H100": 2000,
    "A100-SXM4-80GB": 2039,
    "A100 80GB": 1935,
    "A100": 1555,
    "L40S": 864,
    "L40": 864,
    "A10G": 600,
    "A10": 600,
    "L4": 300,
    "T4": 320,
    "V100": 900,
    "RTX 4090": 1008,
    "RTX 3090": 936,
}


def bandwidth_for(name: str) -> float | None:
    """Peak GB/s for a device name (longest matching key), or None."""
    hits = [k for k in BANDWIDTH_GBS if k.lower() in name.lower()]
    return BANDWIDTH_GBS[max(hits, key=len)] if hits else None


def decode_bound_tps(weight_bytes: float, bandwidth_gbs: float) -> float:
    """Upper bound on batch-1 decode tokens/s: one full read of the weights per token."""
    return bandwidth_gbs * 1e9 / weight_bytes


#: ``--cpu-smoke``: the same pipeline on a toy model, to check the script without a GPU
SMOKE_DIMS: dict[str, Any] = {
    **QWEN25_7B,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def build_model(device: str = "cuda", dims: dict[str, Any] = QWEN25_7B) -> Any:
    """A random-weight bf16 Qwen2 (7B dimensions by default), built directly on ``device``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    config = Qwen2Config(**dims, dtype=dtype)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(config, dtype=dtype)
    return model.eval()


#: seconds between power samples where the GPU has no energy counter
POWER_PERIOD_S = 0.1
COUNTER = "NVML energy counter"
INTEGRATED = "power sampled every 100 ms, integrated"


@dataclass
class Energy:
    """One GPU's energy over a ``with`` block, through NVML (``nv``: the ``pynvml`` module,
    initialised; ``handle``: the GPU's).

    The energy counter (mJ) read at entry and exit where the GPU has one; else the power
    draw (mW) sampled every ``period_s`` on a thread, entry and exit included, and
    integrated.  ``source`` says which; ``joules`` and ``seconds`` are the block's.
    """

    nv: Any
    handle: Any
    period_s: float = POWER_PERIOD_S
    clock: Callable[[], float] = time.perf_counter
    source: str = ""
    joules: float = 0.0
    seconds: float = 0.0
    samples: list[tuple[float, float]] = field(default_factory=list)
    _start_mj: float | None = None
    _t0: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _watts(self) -> float:
        return float(self.nv.nvmlDeviceGetPowerUsage(self.handle)) / 1000.0

    def _sample(self) -> None:
        self.samples.append((self.clock(), self._watts()))

    def _sampler(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def __enter__(self) -> Energy:
        self.samples, self._stop = [], threading.Event()
        try:
            self._start_mj = float(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle))
            self.source = COUNTER
        except Exception:  # pynvml.NVMLError_NotSupported: no counter on this GPU
            self._start_mj = None
            self.source = INTEGRATED
            self._sample()
            self._thread = threading.Thread(target=self._sampler, name="bench-power", daemon=True)
            self._thread.start()
        self._t0 = self.clock()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self.clock()
        self.seconds = end - self._t0
        if self._start_mj is not None:
            stop_mj = float(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle))
            self.joules = (stop_mj - self._start_mj) / 1000.0
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.joules = integrate(self.samples)
        self.seconds = self.samples[-1][0] - self.samples[0][0]

    def figures(self, tokens: int) -> dict[str, Any]:
        """The block's energy for ``tokens`` output tokens: J, s, J/token, tokens/J, mean W."""
        return {
            "source": self.source,
            "joules": self.joules,
            "seconds": self.seconds,
            "tokens": tokens,
            "j_per_token": self.joules / tokens if tokens else None,
            "tokens_per_j": tokens / self.joules if self.joules > 0 else None,
            "watts": self.joules / self.seconds if self.seconds > 0 else None,
        }


def energy_meter(cuda_index: int) -> tuple[Callable[[], Energy] | None, str]:
    """A factory of ``Energy`` blocks for CUDA device ``cuda_index``, or None and why not
    (no ``nvidia-ml-py``, no driver, a device NVML cannot name)."""
    from llmload.common import nvml

    try:
        nv = nvml.init()
        found = nvml.nvml_indexes(nv, [cuda_index])
        if not found:
            return None, f"cuda:{cuda_index} is no GPU NVML can name"
        handle = nv.nvmlDeviceGetHandleByIndex(found[0])
    except nvml.NvmlUnavailable as exc:
        return None, str(exc)
    except Exception as exc:  # pynvml.NVMLError
        return None, f"NVML: {exc}"
    return (lambda: Energy(nv, handle)), f"NVML GPU {found[0]}"


async def _one(engine: Any, ids: list[int], tokens: int, seed: int) -> tuple[float, float, int]:
    """(ttft s, decode tokens/s, tokens) for one request straight through ``engine.generate``."""
    from llmload.target_server.engine import GenerationRequest

    req = GenerationRequest(f"r{seed}", None, "x", tokens, ignore_eos=True, seed=seed)
    prepared = engine.prepare_ids(req, ids)
    t0 = time.perf_counter()
    first = last = 0.0
    n = 0
    async for _piece in engine.generate(prepared):
        n += 1
        last = time.perf_counter() - t0
        first = first or last
    return first, (n - 1) / (last - first) if last > first else 0.0, n


async def measure(
    batching: str,
    lm: Any,
    args: argparse.Namespace,
    energy: Callable[[], Energy] | None = None,
) -> dict[str, Any]:
    """Run the three measurements on one engine; with ``energy``, the GPU's energy over the
    single-stream requests and over the concurrent streams (``out["energy"]``)."""
    import torch

    from llmload.target_server.model import build
    from llmload.target_server.settings import Settings

    # the model is loaded here already: the continuous loop runs on a thread of this process
    settings = Settings(
        engine="transformers", batching=batching, max_concurrency=64, engine_process="off"
    )
    engine: Any = build(settings)
    await engine.start(lm)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(1000, 100000, (args.prompt,), generator=g).tolist()
    short = prompt[: args.prompt // 8]
    meter: Any = energy if energy is not None else contextlib.nullcontext
    try:
        with meter() as single_e:
            singles = [await _one(engine, prompt, args.tokens, s) for s in range(3)]
        with meter() as many_e:
            t0 = time.perf_counter()
            many = await asyncio.gather(
                *(_one(engine, short, args.tokens, 100 + s) for s in range(args.streams))
            )
            wall = time.perf_counter() - t0
        out: dict[str, Any] = {
            "ttft": statistics.median(s[0] for s in singles),
            "tps": statistics.median(s[1] for s in singles),
            "agg": sum(m[2] for m in many) / wall,
            "ttft_p50_many": statistics.median(m[0] for m in many),
            "mem": float(torch.cuda.max_memory_allocated()) if lm.device.type == "cuda" else 0.0,
        }
        if energy is not None:
            out["energy"] = {
                "single": single_e.figures(sum(x[2] for x in singles)),
                "streams": many_e.figures(sum(m[2] for m in many)),
            }
    finally:
        await engine.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__)
    parser.add_argument("--bandwidth-gbs", type=float, help="GPU memory bandwidth (default: table)")
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens for TTFT")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per request")
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--engines", default="continuous,none")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--cpu-smoke", action="store_true", help="toy model on the CPU (tests)")
    args = parser.parse_args(argv)
    import torch

    if args.cpu_smoke:
        lm = loaded_model(build_model("cpu", SMOKE_DIMS))
        results = {b: asyncio.run(measure(b, lm, args)) for b in args.engines.split(",")}
        print(render("cpu smoke", 1.0, 1.0, lm.params, 1.0, 0.0, results, args, "no GPU"))
        return 0
    if not torch.cuda.is_available():
        print(
            "bench gpu: no CUDA device here (torch.cuda.is_available() is False), nothing "
            "measured. Run `make bench-gpu` (or `python3 -m bench.gpu`, see docs/engines.md) "
            "on a machine with an NVIDIA GPU and a CUDA build of torch.",
            file=sys.stderr,
        )
        return 2
    name = torch.cuda.get_device_name()
    bandwidth = args.bandwidth_gbs or bandwidth_for(name)
    if bandwidth is None:
        print(f"bench gpu: unknown bandwidth for {name!r}; pass --bandwidth-gbs", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    lm = loaded_model(build_model("cuda"))
    build_s = time.perf_counter() - t0
    weight_bytes = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    bound = decode_bound_tps(weight_bytes, bandwidth)
    energy, energy_from = energy_meter(lm.device.index or 0)
    results = {b: asyncio.run(measure(b, lm, args, energy)) for b in args.engines.split(",")}
    body = render(
        name, bandwidth, weight_bytes, lm.params, bound, build_s, results, args, energy_from
    )
    print(body)
    if not args.no_write:
        from bench.mdsection import write_section

        write_section("gpu", body)
    return 0


def loaded_model(model: Any) -> Any:
    """Wrap the random model with the embedded tokenizer as a ``LoadedModel``."""
    import torch
    from transformers import AutoTokenizer

    from llmload.target_server.model.embedded import embedded_model_dir
    from llmload.target_server.model.loader import LoadedModel, cache_kwarg

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    model.generation_config.eos_token_id = [tokenizer.eos_token_id]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.do_sample = False
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name="qwen2.5-7b-dims-random",
        source="random bf16 weights, Qwen2.5-7B-Instruct dimensions",
        embedded=False,
        device=next(model.parameters()).device,
        dtype=next(model.parameters()).dtype,
        quantization="none",
        params=sum(p.numel() for p in model.parameters()),
        max_context=int(model.config.max_position_embeddings),
        eos_ids=[tokenizer.eos_token_id],
        load_s=0.0,
        cache_kwarg=cache_kwarg(model),
        threads=torch.get_num_threads(),
    )


def render(
    name: str,
    bandwidth: float,
    weight_bytes: float,
    params: int,
    bound: float,
    build_s: float,
    results: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    energy_from: str = "",
) -> str:
    """The BENCHMARKS.md section (``energy_from``: the GPU NVML read, or why none)."""
    from bench.mdsection import machine

    lines = [
        f"`make bench-gpu` (`python -m bench.gpu`) — {name}, {bandwidth:g} GB/s; host {machine()}.",
        "",
        f"Model: Qwen2.5-7B-Instruct dimensions, random bf16 weights ({params / 1e9:.2f} B "
        f"params, {weight_bytes / 1e9:.1f} GB; built on the GPU in {build_s:.0f} s). "
        f"Batch-1 decode bound = bandwidth / weight bytes = **{bound:.0f} tokens/s**. "
        "In-process through the engines' `generate` (no HTTP).",
        "",
        f"| engine | TTFT, {args.prompt}-token prompt | single-stream decode tok/s | "
        f"/ bound | {args.streams} streams aggregate tok/s | TTFT p50 at {args.streams} | "
        "peak GPU memory |",
        "|---|---|---|---|---|---|---|",
    ]
    for engine, r in results.items():
        lines.append(
            f"| {engine} | {r['ttft'] * 1000:.0f} ms | {r['tps']:.1f} | {r['tps'] / bound:.0%} "
            f"| {r['agg']:.0f} | {r['ttft_p50_many'] * 1000:.0f} ms | {r['mem'] / 2**30:.1f} GiB |"
        )
    if "continuous" in results and "none" in results:
        ratio = results["continuous"]["agg"] / results["none"]["agg"]
        lines += ["", f"Continuous / none aggregate at {args.streams} streams: **{ratio:.1f}×**."]
    return "\n".join(lines + render_energy(results, args, energy_from))


def _num(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def render_energy(
    results: dict[str, dict[str, Any]], args: argparse.Namespace, energy_from: str
) -> list[str]:
    """The energy lines: a table per engine and block, or why there is none."""
    rows = [(b, r["energy"]) for b, r in results.items() if "energy" in r]
    if not rows:
        return ["", f"Energy: not measured ({energy_from or 'no NVML'})."]
    sources = sorted({e["source"] for _, blocks in rows for e in blocks.values()})
    lines = [
        "",
        f"Energy ({energy_from}; {', '.join(sources)}; the whole board, idle draw included, "
        "over each block's wall time):",
        "",
        "| engine | block | output tokens | s | J | J / output token | output tokens / J "
        "| mean W |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = {
        "single": f"single stream (3 × {args.prompt}-token prompt + {args.tokens} tokens)",
        "streams": f"{args.streams} concurrent streams",
    }
    for engine, blocks in rows:
        for key, e in blocks.items():
            lines.append(
                f"| {engine} | {names[key]} | {e['tokens']} | {e['seconds']:.1f} "
                f"| {e['joules']:.0f} | {_num(e['j_per_token'], '.3f')} "
                f"| {_num(e['tokens_per_j'], '.2f')} | {_num(e['watts'], '.0f')} |"
            )
    return lines


if __name__ == "__main__":
    sys.exit(main())
