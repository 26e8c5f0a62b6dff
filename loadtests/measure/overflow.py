"""Is an HTTP 4xx the target saying the request does not fit its context length?

Each server words it its own way; ``is_context_overflow(body)`` recognises them in the
error body (JSON or text), and the timing core records such a response as
``context_overflow`` instead of a generic ``http_4xx``:

* vLLM: "This model's maximum context length is 2048 tokens. However, you requested
  2100 tokens (...)" (older), "... maximum context length is 2048 tokens. However,
  your prompt contains at least 2049 input tokens", "... and your request has 1900
  input tokens (256 > 2048 - 1900)", "maximum context length of 2048 tokens. You
  requested a total of ...", "The decoder prompt (length 2049) is longer than the
  maximum model length of 2048";
* SGLang: "Requested token count exceeds the model's maximum context length of 2048
  tokens. You requested a total of ...", "The input (2049 tokens) is longer than the
  model's context length (2048 tokens)", "Input length (2049 tokens) exceeds the
  maximum allowed length (2048 tokens)";
* TGI (422): "Input validation error: `inputs` tokens + `max_new_tokens` must be <=
  4096", "`inputs` must have less than 4000 tokens";
* OpenAI and the bundled server: error code ``context_length_exceeded``.
"""

from __future__ import annotations

import re

_PATTERNS = re.compile(
    r"maximum context length"
    r"|longer than the model's context length"
    r"|longer than the maximum model length"
    r"|exceeds the maximum allowed length"
    r"|context_length_exceeded"
    r"|tokens \+ `max_new_tokens` must be <="
    r"|`inputs` must have less than \d+ tokens",
    re.IGNORECASE,
)

#: what to change, said once per phase by the ``context_overflow`` diagnostic
HINT = (
    "The prompt plus max_tokens did not fit the target's context length. llmload keeps "
    "requests inside it when the target tells its length (/v1/models max_model_len, TGI's "
    "/info) and counts prompts with the target's /tokenize when it has one (vLLM, SGLang, "
    "TGI); without both it can only bound the count. Lower --max-tokens, pass the served "
    "model's tokenizer with --tokenizer, or use shorter prompts (--dataset, --input-len)."
)


def is_context_overflow(body: str) -> bool:
    """Whether an error body says the request exceeded the context length."""
    return _PATTERNS.search(body) is not None
