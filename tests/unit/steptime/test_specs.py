"""The GPU table, model specs from fields and from config.json, and the memory cap.

The published configs below are written out field by field from their Hugging Face
``config.json`` files (not bundled: the Llama 3 configs are under the Llama community
licences); sources: ``meta-llama/Llama-3.1-8B-Instruct``, ``meta-llama/Llama-3.3-70B-Instruct``
and ``Qwen/Qwen3-30B-A3B`` on huggingface.co.
"""

import json
import math

import pytest

from allocator.core.hardware import GPUS, Hardware, gpu, known_gpus
from allocator.core.model_spec import ModelSpec, compute_dtype, dtype_bytes, max_batch
from allocator.exceptions import InputError

LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
LLAMA_33_70B = dict(
    LLAMA_31_8B,
    hidden_size=8192,
    intermediate_size=28672,
    num_hidden_layers=80,
    num_attention_heads=64,
)
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


# ---------------------------------------------------------------- hardware
def test_the_six_gpus_are_bundled_with_a_source_for_every_figure():
    assert set(known_gpus()) == {"h100-sxm", "h200", "a100-80g", "l40s", "mi300x", "b200"}
    for g in GPUS.values():
        keys = {f"dense_tflops.{d}" for d in g.dense_tflops} | {"bandwidth_tb_s", "memory_gb"}
        assert set(g.sources) == keys, g.name
        assert all("http" in s for s in g.sources.values()), g.name


def test_dense_figures_are_half_the_printed_sparse_ones_where_only_sparse_is_printed():
    assert GPUS["h100-sxm"].dense_tflops["bf16"] == 1979 / 2
    assert GPUS["h100-sxm"].dense_tflops["fp8"] == 3958 / 2
    assert GPUS["h200"].dense_tflops["fp8"] == 3958 / 2
    assert GPUS["b200"].dense_tflops["bf16"] == 4500 / 2
    assert "dense = " in GPUS["h100-sxm"].sources["dense_tflops.bf16"]
    # where the vendor prints dense | sparse, the dense figure is taken as printed
    assert GPUS["a100-80g"].dense_tflops["bf16"] == 312
    assert GPUS["mi300x"].dense_tflops["bf16"] == 1307.4


def test_an_unknown_gpu_is_refused_listing_the_known_ones():
    with pytest.raises(InputError) as e:
        gpu("h800")
    assert e.value.field == "serving.hardware.gpu"
    for name in known_gpus():
        assert name in e.value.message
    assert gpu("H100-SXM").name == "h100-sxm"


def test_count_multiplies_bandwidth_throughput_and_memory():
    one, four = Hardware.from_fields("h200"), Hardware.from_fields("h200", 4)
    assert four.bandwidth_bytes_s == 4 * one.bandwidth_bytes_s == 4 * 4.8e12
    assert four.flops("bf16") == 4 * 989.5e12
    assert four.memory_bytes == 4 * 141e9
    with pytest.raises(InputError, match="count"):
        Hardware.from_fields("h200", 0)


def test_a_dtype_without_a_figure_is_refused():
    with pytest.raises(InputError) as e:
        Hardware.from_fields("a100-80g").flops("fp8")
    assert e.value.field == "serving.model.dtype" and "bf16" in e.value.message


# ---------------------------------------------------------------- model specs
def test_kv_bytes_per_token_of_two_published_configs():
    """2 · layers · kv_heads · head_dim · 2 bytes (bf16), by hand:
    Llama-3.1-8B: 2 · 32 · 8 · 128 · 2 = 131,072; Llama-3.3-70B: 2 · 80 · 8 · 128 · 2 = 327,680."""
    assert ModelSpec.from_hf_config(LLAMA_31_8B).kv_bytes_per_token == 131_072
    assert ModelSpec.from_hf_config(LLAMA_33_70B).kv_bytes_per_token == 327_680
    fp8 = ModelSpec.from_hf_config(LLAMA_33_70B, kv_dtype="fp8")
    assert fp8.kv_bytes_per_token == 163_840


def test_parameter_counts_derived_from_config():
    """By hand (module docstring's layout):
    Llama-3.1-8B per layer 4096·4096·2 + 4096·1024·2 + 3·4096·14336 + 2·4096 = 218,112,000;
    32 layers + 4096 + 2·128256·4096 = 8,030,261,248.
    Llama-3.3-70B: 80 · 855,654,400 + 8192 + 2·128256·8192 = 70,553,706,496.
    Qwen3-30B-A3B per layer: attention 2048·4096·2 + 2048·512·2 + 2·128 = 18,874,624,
    router 2048·128 = 262,144, experts 128·3·2048·768 = 603,979,776, norms 4096:
    623,120,640; 48 layers + 2048 + 2·151936·2048 = 30,532,122,624; active: experts
    8·3·2048·768 = 37,748,736 per layer instead, 3,353,032,704."""
    l8 = ModelSpec.from_hf_config(LLAMA_31_8B)
    assert l8.params == 8_030_261_248
    assert l8.active_params == l8.params
    assert l8.embedding_params == 128256 * 4096
    assert ModelSpec.from_hf_config(LLAMA_33_70B).params == 70_553_706_496
    q = ModelSpec.from_hf_config(QWEN3_30B_A3B)
    assert q.params == 30_532_122_624
    assert q.active_params == 3_353_032_704
    assert q.experts == 128 and q.experts_per_token == 8
    assert q.expert_params == 48 * 603_979_776
    assert q.expert_bytes == 48 * 3 * 2048 * 768 * 2
    assert q.kv_bytes_per_token == 2 * 48 * 4 * 128 * 2


def test_from_fields_matches_from_config_where_they_say_the_same():
    q = ModelSpec.from_hf_config(QWEN3_30B_A3B)
    f = ModelSpec.from_fields(
        params_b=q.params / 1e9,
        active_params_b=q.active_params / 1e9,
        layers=48,
        hidden=2048,
        heads=32,
        kv_heads=4,
        head_dim=128,
        experts=128,
        experts_per_token=8,
    )
    assert math.isclose(f.expert_params, q.expert_params, rel_tol=1e-12)
    assert f.kv_bytes_per_token == q.kv_bytes_per_token
    assert (
        ModelSpec.from_fields(params_b=8, layers=32, hidden=4096, heads=32, kv_heads=8).head_dim
        == 128
    )


def test_config_read_from_a_file(tmp_path):
    path = tmp_path / "llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(LLAMA_31_8B))
    spec = ModelSpec.from_hf_config(path)
    assert spec.params == 8_030_261_248 and spec.name == "llama"


@pytest.mark.parametrize(
    "missing", ["hidden_size", "num_hidden_layers", "vocab_size", "torch_dtype"]
)
def test_a_config_without_a_needed_field_is_refused_naming_it(missing):
    cfg = {k: v for k, v in LLAMA_31_8B.items() if k != missing}
    with pytest.raises(InputError) as e:
        ModelSpec.from_hf_config(cfg)
    assert missing in e.value.field and missing in e.value.message


def test_moe_config_without_its_expert_fields_is_refused():
    cfg = {k: v for k, v in QWEN3_30B_A3B.items() if k != "moe_intermediate_size"}
    with pytest.raises(InputError, match="moe_intermediate_size"):
        ModelSpec.from_hf_config(cfg)


def test_incomplete_mla_and_unknown_architectures_are_refused():
    # latent attention is read (tests/unit/core/test_model_shapes.py); a config without
    # the fields it needs is refused naming the first one missing
    with pytest.raises(InputError) as e:
        ModelSpec.from_hf_config({"model_type": "deepseek_v3", "kv_lora_rank": 512})
    assert e.value.field.endswith("hidden_size")
    with pytest.raises(InputError) as e:
        ModelSpec.from_hf_config(dict(LLAMA_31_8B, model_type="gpt2"))
    assert e.value.field.endswith("model_type") and "llama" in e.value.message


def test_bad_fields_are_refused_naming_the_field():
    with pytest.raises(InputError) as e:
        ModelSpec.from_fields(params_b=8, layers=32, hidden=4096, heads=32, kv_heads=64)
    assert e.value.field == "serving.model.kv_heads"
    with pytest.raises(InputError) as e:
        ModelSpec.from_fields(params_b=8, layers=32, hidden=4096, heads=32, kv_heads=8, dtype="fp7")
    assert e.value.field == "serving.model.dtype"
    with pytest.raises(InputError, match="active_params_b"):
        ModelSpec.from_fields(
            params_b=30,
            layers=48,
            hidden=2048,
            heads=32,
            kv_heads=4,
            experts=128,
            experts_per_token=8,
        )


def test_dtypes():
    assert dtype_bytes("bfloat16") == 2 and dtype_bytes("float8_e4m3fn") == 1
    assert compute_dtype("torch.float16") == "fp16" and compute_dtype("int4") == "bf16"
    with pytest.raises(InputError):
        compute_dtype("float32")


# ---------------------------------------------------------------- memory cap
def test_memory_cap_against_hand_computed_kv_bytes():
    """Llama-3.1-8B in bf16 on one H100 (80 GB), utilisation 0.9:
    room = 80e9 · 0.9 − 8,030,261,248 · 2 = 72e9 − 16,060,522,496 = 55,939,477,504 bytes;
    at 8,192 tokens of 131,072 B: 55,939,477,504 / 1,073,741,824 = 52.1 → 52 sequences;
    at 32,768 tokens: / 4,294,967,296 = 13.02 → 13.
    Llama-3.3-70B on 2 x H200 (282 GB): room = 253.8e9 − 141,107,412,992 = 112,692,587,008;
    at 8,192 tokens of 327,680 B (2,684,354,560 B/seq): 41.98 → 41.
    At vLLM 0.33.0's default utilisation 0.92 the 8B's room is 73.6e9 − 16,060,522,496 =
    57,539,477,504 bytes: 53.59 → 53 sequences at 8,192 tokens."""
    l8 = ModelSpec.from_hf_config(LLAMA_31_8B)
    h100 = Hardware.from_fields("h100-sxm")
    assert max_batch(h100, l8, 8192, utilisation=0.9) == 52
    assert max_batch(h100, l8, 32768, utilisation=0.9) == 13
    assert max_batch(h100, l8, 8192) == 53  # the default is vLLM's 0.92
    l70 = ModelSpec.from_hf_config(LLAMA_33_70B)
    assert max_batch(Hardware.from_fields("h200", 2), l70, 8192, utilisation=0.9) == 41
    assert max_batch(h100, l70, 1024, utilisation=0.9) == 0  # 141 GB do not fit in 72 GB


def test_memory_cap_falls_with_context_and_with_a_hosted_drafter():
    l8 = ModelSpec.from_hf_config(LLAMA_31_8B)
    h100 = Hardware.from_fields("h100-sxm")
    caps = [max_batch(h100, l8, c) for c in (1024, 4096, 16384, 65536)]
    assert caps == sorted(caps, reverse=True) and caps[0] > caps[-1]
    head = ModelSpec.from_fields(params_b=0.25, layers=1, hidden=4096, heads=32, kv_heads=8)
    assert max_batch(h100, l8, 4096, drafters=[head]) < max_batch(h100, l8, 4096)
    with pytest.raises(InputError):
        max_batch(h100, l8, 4096, utilisation=1.5)
