"""The token ids of vLLM 0.10.1.1's random dataset, an independent reference for the
prompt-identity rule of ``allocator validate --sweep``
(:mod:`allocator.analysis.validation_sweep`).

Copied from ``vllm/benchmarks/datasets.py`` of the vLLM 0.10.1.1 wheel (Apache License
2.0, (c) the vLLM project), ``RandomDataset.__init__`` (lines 322-327: ``np.random.seed``)
and ``RandomDataset.sample`` (lines 329-374), with the tokenizer left out: the token ids
of each prompt before vLLM decodes and re-encodes them (lines 364-367), the prefix drawn
as vLLM draws it (``prefix_len`` 0: none). ``vocab_size`` and ``num_special_tokens`` stand
for the tokenizer's. ``np.random`` is played by a ``RandomState`` of the seed (the global
generator's stream).
"""

from __future__ import annotations

import numpy as np


def random_prompts(
    num_requests: int,
    *,
    seed: int = 0,
    input_len: int = 1024,
    output_len: int = 128,
    range_ratio: float = 0.0,
    prefix_len: int = 0,
    vocab_size: int = 151_643,
    num_special_tokens: int = 0,
) -> list[list[int]]:
    """Each request's prompt token ids (before the decode/re-encode round trip)."""
    # vLLM seeds numpy's global legacy generator (RandomDataset.__init__); a RandomState of
    # the seed is that generator's stream, without touching the global one
    rs = np.random.RandomState(seed)  # noqa: NPY002 (vLLM's legacy generator, on purpose)
    assert range_ratio < 1.0
    real_input_len = input_len - num_special_tokens
    prefix_token_ids = rs.randint(0, vocab_size, size=prefix_len).tolist() if prefix_len > 0 else []
    input_low = int(real_input_len * (1 - range_ratio))
    input_high = int(real_input_len * (1 + range_ratio))
    output_low = int(output_len * (1 - range_ratio))
    output_high = int(output_len * (1 + range_ratio))
    input_lens = rs.randint(input_low, input_high + 1, size=num_requests)
    rs.randint(output_low, output_high + 1, size=num_requests)  # output_lens
    offsets = rs.randint(0, vocab_size, size=num_requests)
    prompts = []
    for i in range(num_requests):
        inner_seq = ((offsets[i] + i + np.arange(input_lens[i])) % vocab_size).tolist()
        prompts.append(prefix_token_ids + inner_seq)
    return prompts


__all__ = ["random_prompts"]
