"""``make bench-gpu`` (``python -m bench.gpu``): the transformers engines at 7B scale on a GPU.

A ``Qwen2ForCausalLM`` with Qwen2.5-7B-Instruct's published dimensions and random
bf16 weights (nothing is downloaded) runs inside both engines, in-process:

- TTFT of one request with a 512-token prompt (continuous engine);
- single-stream decode tokens/s against the memory-bandwidth bound
  (weight bytes / bandwidth: every decode step reads every weight once);
- aggregate output tokens/s of 20 concurrent streams, continuous vs none.

The GPU's bandwidth comes from a table by device name or ``--bandwidth-gbs``.
Without CUDA it measures nothing and exits 2 with a message.  Results go to
BENCHMARKS.md section ``gpu``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

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


async def measure(batching: str, lm: Any, args: argparse.Namespace) -> dict[str, float]:
    """Run the three measurements on one engine."""
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
    try:
        singles = [await _one(engine, prompt, args.tokens, s) for s in range(3)]
        t0 = time.perf_counter()
        many = await asyncio.gather(
            *(_one(engine, short, args.tokens, 100 + s) for s in range(args.streams))
        )
        wall = time.perf_counter() - t0
        out = {
            "ttft": statistics.median(s[0] for s in singles),
            "tps": statistics.median(s[1] for s in singles),
            "agg": sum(m[2] for m in many) / wall,
            "ttft_p50_many": statistics.median(m[0] for m in many),
            "mem": float(torch.cuda.max_memory_allocated()) if lm.device.type == "cuda" else 0.0,
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
        print(render("cpu smoke", 1.0, 1.0, lm.params, 1.0, 0.0, results, args))
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
    results = {b: asyncio.run(measure(b, lm, args)) for b in args.engines.split(",")}
    body = render(name, bandwidth, weight_bytes, lm.params, bound, build_s, results, args)
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
    results: dict[str, dict[str, float]],
    args: argparse.Namespace,
) -> str:
    """The BENCHMARKS.md section."""
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
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
