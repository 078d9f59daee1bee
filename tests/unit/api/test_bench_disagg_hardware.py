"""``api.bench`` with a pool on its own GPU or tensor-parallel degree: the pool runs the
problem the serving front re-targets to that hardware, the other pool the file's; what
cannot be re-targeted is refused naming the pool's parameter."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from allocator import api
from allocator.analysis.deployments import retarget
from allocator.api import load, load_data
from allocator.exceptions import ParameterError
from tests.unit.analysis import requests_problem as rp

ROOT = Path(__file__).resolve().parents[3]
ROOFLINE = ROOT / "problems/roofline-llama31-8b.yaml"
RUN = dict(request_rate=10.0, num_prompts=60, input_len=1500, output_len=40, seed=2)
PD = dict(prefill_replicas=1, decode_replicas=1)


def pool(doc_result, name: str) -> dict:
    out = dict(doc_result.disagg["pools"][name])
    out.pop("replicas")
    return out


def test_the_prefill_pool_on_another_gpu_is_that_gpus():
    mixed = api.bench(str(ROOFLINE), **RUN, **PD, prefill_gpu="h200")
    moved = retarget(load_data(ROOFLINE), "h200", 1, math.nan)
    everywhere = api.bench(moved, **RUN, **PD)
    # the prefill pool does not see the decode pool: the same run as on an all-H200 file
    assert pool(mixed, "prefill") == pool(everywhere, "prefill")
    assert pool(mixed, "prefill")["gpu"] == "h200"
    assert (pool(mixed, "decode")["gpu"], pool(mixed, "decode")["tp"]) == ("h100-sxm", 1)
    # and not the file's own prefill
    own = api.bench(str(ROOFLINE), **RUN, **PD)
    assert pool(own, "prefill")["mean_ttft_ms"] != pool(mixed, "prefill")["mean_ttft_ms"]


def test_the_decode_pool_at_tp2_decodes_faster():
    own = api.bench(str(ROOFLINE), **RUN, **PD)
    tp2 = api.bench(str(ROOFLINE), **RUN, **PD, decode_tp=2)
    assert pool(tp2, "decode")["tp"] == 2 and pool(tp2, "prefill")["tp"] == 1
    assert pool(tp2, "prefill") == pool(own, "prefill")
    assert tp2.metrics["mean_tpot_ms"] < own.metrics["mean_tpot_ms"]


@pytest.mark.parametrize(
    "problem, kwargs, field, says",
    [
        (ROOFLINE, {"decode_gpu": "x100"}, "decode_gpu", "unknown GPU 'x100'"),
        (ROOFLINE, {"prefill_tp": 9}, "prefill_tp", "an integer from 1 to 8"),
        ("built", {"prefill_gpu": "h200"}, "prefill_gpu", "a built Problem cannot be"),
        ("measured", {"decode_gpu": "h200"}, "decode_gpu", "serving.step_ms was measured"),
        (ROOFLINE, {"decode_tp": 2, **{k: None for k in PD}}, "decode_tp", "only with"),
    ],
)
def test_refusals(problem, kwargs, field, says):
    if problem == "built":
        problem = load(ROOFLINE)
    elif problem == "measured":
        problem = rp.data(
            model={
                "params_b": 8.0, "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                "head_dim": 128, "dtype": "bf16", "kv_dtype": "bf16",
            },
            hardware={"gpu": "h100-sxm", "count": 2},
        )  # fmt: skip
    args = {**RUN, **PD, **kwargs}
    with pytest.raises(ParameterError) as e:
        api.bench(problem if not isinstance(problem, Path) else str(problem), **args)
    assert e.value.field == field and says in e.value.message, e.value.message
