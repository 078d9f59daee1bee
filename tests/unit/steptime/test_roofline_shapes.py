"""The roofline with this year's shapes: sliding-window layers read and attend to at most
their window, latent attention caches its latent and prefills in the compute form, and
tensor parallelism that does not divide the heads is refused.

The toy replica of tests/unit/steptime/test_roofline.py (1 TB/s, 100 TFLOP/s of bf16)
keeps the figures round; by hand, for 16 layers, 16 heads and 4 KV heads of 128 dims:

    kv_ms   = 10³ · (2·16·4·128·2 = 32,768 B) / 10¹² = 3.2768e-5 ms per token
    attn_ms = 10³ · (4·16·16·128 = 131,072) / 10¹⁴   = 1.31072e-6 ms per (token × context)
    token_ms = 10³ · 2·10⁹ / 10¹⁴                    = 0.02 ms per token
"""

import shutil
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest
import yaml

from allocator.core.hardware import GPU, Hardware
from allocator.core.model_spec import ModelSpec
from allocator.exceptions import InputError
from allocator.io.build import problem_from_file
from allocator.model.memory_fit import max_batch, memory_notes
from allocator.model.steptime.base import step_inputs
from allocator.model.steptime.roofline import PeakTerms, RooflinePredictor

TOY_HW = Hardware(
    GPU("toy", "a round-figure test accelerator", MappingProxyType({"bf16": 100.0}), 1.0, 100.0)
)
NONE = np.zeros(0, dtype=bool)
SHAPE = {"params": 1e9, "layers": 16, "hidden": 2048, "heads": 16, "kv_heads": 4, "head_dim": 128}
#: every other layer a 128-token window, as GPT-OSS
WINDOWED = ModelSpec(**SHAPE, windows=(128, 0) * 8)
FULL = ModelSpec(**SHAPE)


def test_decoding_reads_and_attends_to_at_most_the_window():
    """4 sequences of 1,000 cached tokens, one token each: half the layers read 1,000
    tokens, half 128, on average 564 a layer. KV read 3.2768e-5 x 4 x 564 = 0.073924608 ms
    (4,000 tokens' worth, 0.131072 ms, without windows); attention 1.31072e-6 x 4 x 564 =
    2.95698432e-3 ms on top of the linear layers' 0.02 x 4 = 0.08 ms."""
    at = {c: step_inputs(NONE, 0, 1, 4, c) for c in (0.0, 1000.0)}
    r = RooflinePredictor.from_specs(TOY_HW, WINDOWED)
    (m0, _), (m1, c1) = r.verifier_parts(at[0.0]), r.verifier_parts(at[1000.0])
    assert m1[0] - m0[0] == pytest.approx(0.073924608, rel=1e-12)
    assert c1[0] == pytest.approx(0.08 + 2.95698432e-3, rel=1e-12)
    full = RooflinePredictor.from_specs(TOY_HW, FULL)
    assert full.verifier_parts(at[1000.0])[0][0] - full.verifier_parts(at[0.0])[0][0] == (
        pytest.approx(0.131072, rel=1e-12)
    )
    # below the window both read alike
    below = step_inputs(NONE, 0, 1, 4, 100.0)
    assert r.verifier_parts(below)[0][0] == full.verifier_parts(below)[0][0]


def test_prefill_pairs_on_windowed_layers():
    """A 1,000-token prompt: full layers 1000·1001/2 = 500,500 pairs; a 128 window
    128·129/2 + 872·128 = 8,256 + 111,616 = 119,872; half each: 310,186. A 100-token
    prompt is inside the window: 5,050 either way."""
    peak = PeakTerms(windows=((128, 0.5),))
    assert list(peak.prefill_pairs(np.array([100.0, 1000.0]))) == [5050.0, 310_186.0]


def test_linear_form_at_a_context_past_the_window():
    """v1 = kv_ms x 564 = 1.8481152e-2 ms; c = 0.02 + 1.31072e-6 x 564 = 2.073924608e-2."""
    lf = RooflinePredictor.from_specs(TOY_HW, WINDOWED).linear_form(1000.0)
    assert lf.v1 == pytest.approx(1.8481152e-2, rel=1e-12)
    assert lf.c == pytest.approx(2.073924608e-2, rel=1e-12)


def test_latent_attention_peak_terms():
    """16 layers, 16 heads, kv_lora_rank 512, rope 64, nope 128, v 128: KV 16 x 576 x 2 =
    18,432 bytes a token, kv_ms 1.8432e-5; decode attention 2·16·16·(2·512 + 64) =
    557,056 FLOPs a pair, attn_ms 5.57056e-6; prefill 2·16·16·(128 + 64 + 128) = 163,840
    a pair. A 100-token prompt: 5,050 pairs x 1.6384e-6 ms = 8.27392e-3 ms of attention,
    on top of 100 x 0.02 = 2 ms."""
    mla = ModelSpec(
        **dict(SHAPE, kv_heads=16, head_dim=192),
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
    )
    r = RooflinePredictor.from_specs(TOY_HW, mla)
    assert r.peak.kv_ms == pytest.approx(1.8432e-5, rel=1e-12)
    assert r.peak.attn_ms == pytest.approx(5.57056e-6, rel=1e-12)
    prefill = r.prefill_compute_ms(step_inputs(NONE, 0, 1, 0, 0.0, 100.0))
    assert prefill[0] == pytest.approx(2.0 + 8.27392e-3, rel=1e-12)


def test_tensor_parallelism_not_dividing_the_heads_is_refused():
    with pytest.raises(InputError) as e:
        RooflinePredictor.from_specs(Hardware(TOY_HW.gpu, 3), FULL)
    assert e.value.field == "serving.hardware.count" and "16 heads" in e.value.message
    assert "\n" not in str(e.value)


def test_kv_heads_fewer_than_the_gpus_are_replicated():
    """4 KV heads on 8 GPUs: each held twice, 2 x 32,768 bytes a token over 8 TB/s."""
    r = RooflinePredictor.from_specs(Hardware(TOY_HW.gpu, 8, "nvlink4"), FULL)
    assert r.peak.kv_ms == pytest.approx(1e3 * 2 * 32_768 / 8e12, rel=1e-12)


def test_a_problem_file_with_gpt_oss_caps_the_batch_by_its_windows(tmp_path):
    """The bundled GPT-OSS-120B config under serving.model on one H100, no drafter
    hosted: 27 sequences of 8,192 tokens (tests/unit/core/test_model_shapes.py works it
    out), and the note says the windows hold less."""
    root = Path(__file__).resolve().parents[3]
    shutil.copy(
        root / "tests/support/fixtures/configs/gpt-oss-120b.config.json", tmp_path / "c.json"
    )
    data = yaml.safe_load((root / "problems/roofline-llama31-8b.yaml").read_text())
    data["serving"]["model"] = {"config": "c.json"}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    problem = problem_from_file(tmp_path / "p.yaml")
    none = np.zeros((1, len(problem.drafters)), dtype=bool)
    assert max_batch(problem, none, 8192.0)[0] == 27
    assert "sliding-window layer" in memory_notes(problem, [8192.0])[0]
