"""The slot KV cache of the running batch: every row decodes exactly as it would alone."""

from __future__ import annotations

from pathlib import Path

import torch

from llmload.target_server.model.kvbatch import SlotBatch, swap_remove_order

STEPS = 12


def _cache_kwarg(model: object) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def test_rows_joining_and_leaving_decode_like_single_sequences(embedded_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(embedded_model).eval()
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 1000, (n,), generator=g).tolist() for n in (5, 23, 9, 40)]
    with torch.inference_mode():
        alone = []
        for p in prompts:
            out = model.generate(
                torch.tensor([p]), max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False
            )
            alone.append(out[0, len(p) :].tolist())

        batch = SlotBatch(model, _cache_kwarg(model), torch.device("cpu"), rows=2)
        rows: list[dict] = []  # {"i": prompt index, "tokens": prompt + generated}
        waiting = list(range(len(prompts)))
        step = 0
        while waiting or rows:
            if rows:
                logits = batch.decode([r["tokens"][-1] for r in rows])
                for r, row_logits in zip(rows, logits, strict=True):
                    r["tokens"].append(int(row_logits.argmax()))
            if waiting and step % 3 == 0:  # a newcomer every third step, two at once at the start
                new = [waiting.pop(0)] + ([waiting.pop(0)] if step == 0 else [])
                logits = batch.prefill([prompts[i] for i in new])
                for i, row_logits in zip(new, logits, strict=True):
                    rows.append({"i": i, "tokens": prompts[i] + [int(row_logits.argmax())]})
            done = [r for r in rows if len(r["tokens"]) - len(prompts[r["i"]]) >= STEPS]
            for r in done:
                assert r["tokens"][len(prompts[r["i"]]) :] == alone[r["i"]], r["i"]
            keep = swap_remove_order(len(rows), {k for k, r in enumerate(rows) if r in done})
            batch.select(keep)
            rows = [rows[k] for k in keep]
            assert len(batch) == len(rows)
            step += 1
    assert len(batch) == 0


def test_chunked_prefill_matches_one_pass(embedded_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(embedded_model).eval()
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 1000, (n,), generator=g).tolist() for n in (5, 23, 40)]
    with torch.inference_mode():
        whole = SlotBatch(model, _cache_kwarg(model), torch.device("cpu"), rows=2)
        first = whole.prefill(prompts).argmax(-1).tolist()
        chunked = SlotBatch(model, _cache_kwarg(model), torch.device("cpu"), rows=2)
        chunked.prefill([[7, 8, 9]])  # a running row the prefill joins later
        job = chunked.start_prefill(prompts)
        steps = 0
        while (logits := job.step(7)) is None:
            steps += 1
        assert steps == 5 and job.remaining == 0  # 40 columns in chunks of 7
        chunked.merge(job)
        assert logits.argmax(-1).tolist() == first
        chunked.select([1, 2, 3])  # the helper row leaves; the others move down a slot
        tokens = [p + [t] for p, t in zip(prompts, first, strict=True)]
        for batch in (whole, chunked):
            rows = [list(t) for t in tokens]
            for _ in range(4):
                out = batch.decode([r[-1] for r in rows])
                for r, lg in zip(rows, out, strict=True):
                    r.append(int(lg.argmax()))
            if batch is whole:
                expected = rows
        assert rows == expected


def test_swap_remove_moves_only_as_many_rows_as_leave() -> None:
    assert swap_remove_order(5, {1}) == [0, 4, 2, 3]
    assert swap_remove_order(5, {3, 4}) == [0, 1, 2]
    assert swap_remove_order(5, {0, 2}) == [3, 1, 4]
    assert swap_remove_order(2, {0, 1}) == []


def test_cache_grows_past_its_first_allocation_and_matches_a_full_forward() -> None:
    """A prompt and decode longer than the first columns (256), rows beyond the first slots;
    a 3-layer model with grouped-query attention (the embedded model has one layer)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    g = torch.Generator().manual_seed(9)
    prompts = [torch.randint(3, 1000, (n,), generator=g).tolist() for n in (250, 3, 7)]
    with torch.inference_mode():
        batch = SlotBatch(model, _cache_kwarg(model), torch.device("cpu"), rows=1)
        logits = batch.prefill(prompts)
        seqs = [p + [int(t)] for p, t in zip(prompts, logits.argmax(-1).tolist(), strict=True)]
        for _ in range(10):
            out = batch.decode([s[-1] for s in seqs])
            for s, lg in zip(seqs, out, strict=True):
                s.append(int(lg.argmax()))
        assert batch.cache.capacity[1] > 256 and batch.cache.capacity[0] >= 3
        for s in seqs:  # the cached path's choices equal a cache-free forward's
            full = model(torch.tensor([s[:-1]]), use_cache=False).logits[0]
            n = len(s) - 11
            assert full[n - 1 :].argmax(-1).tolist() == s[n:]
