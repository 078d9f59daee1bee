"""This year's model shapes read from config.json (allocator/core/model_shapes.py):
latent attention, sliding windows, weights by component, shared experts, first dense
layers; and the refusals of configs that are half one thing.

Every expected figure is computed by hand from the published configs bundled in
tests/support/fixtures/configs/ (their sources and licences in the README there).
"""

import json
from pathlib import Path

import pytest

from allocator.core.hardware import Hardware
from allocator.core.model_spec import ModelSpec, max_batch
from allocator.exceptions import InputError

CONFIGS = Path(__file__).resolve().parents[2] / "support" / "fixtures" / "configs"


def config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.config.json").read_text())


def refused(cfg: dict, **kw) -> InputError:
    with pytest.raises(InputError) as e:
        ModelSpec.from_hf_config(cfg, **kw)
    assert "\n" not in str(e.value)
    return e.value


# ---------------------------------------------------------------- DeepSeek-V3 (MLA)
def test_deepseek_v3_latent_kv_bytes_per_token():
    """61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) = 61 x 576 = 35,136 values a
    token; bf16: 35,136 x 2 = 70,272 bytes; fp8: 35,136 bytes. (Per-head K/V would be
    2 x 61 x 128 heads x 192 x 2 = 5,996,544 bytes: 85 times more.)"""
    ds = ModelSpec.from_hf_config(config("deepseek-v3"))
    assert ds.kv_lora_rank == 512 and ds.qk_rope_head_dim == 64
    assert ds.kv_dtype == "bf16" and ds.kv_bytes_per_token == 70_272
    assert ds.with_dtype(kv_dtype="fp8").kv_bytes_per_token == 35_136
    assert ModelSpec.from_hf_config(config("deepseek-v3"), kv_dtype="fp8").kv_bytes_per_token == (
        35_136
    )
    # no window: a sequence of 8,192 tokens holds 8,192 x 70,272 bytes
    assert ds.kv_bytes_at(8192) == 8192 * 70_272


def test_deepseek_v3_parameters_by_component():
    """By hand, h = 7168, 128 heads, q_lora_rank 1536, nope 128, rope 64, v 128:
    attention a layer: q_a 7168·1536 = 11,010,048; q_b 1536·128·192 = 37,748,736;
    kv_a 7168·576 = 4,128,768; kv_b 512·128·256 = 16,777,216; o 128·128·7168 =
    117,440,512: 187,105,280 in matrices, + norms 1536 + 512 = 2,048: 187,107,328.
    Dense MLP (layers 0-2): 3·7168·18432 = 396,361,728. MoE layers 3-60 (58): router
    7168·256 + 256 correction biases = 1,835,264; experts 256·3·7168·2048 =
    11,274,289,152; shared 3·7168·2048 = 44,040,192. Norms 2·7168 a layer.
    Total: 61·187,107,328 + 3·396,361,728 + 58·(1,835,264 + 11,274,289,152 + 44,040,192)
    + 61·14,336 + 7,168 + 2·129,280·7,168 = 671,026,419,200 (DeepSeek's "671B").
    Active: 8 of 256 experts, 58·8·44,040,192 = 20,434,649,088 instead of
    653,908,770,816: 37,552,297,472 (36.6B + the 0.93B input embedding).
    Bytes, FP8 matrices (1 byte) and bf16 rest (2): attention 61·(187,105,280 + 2·2,048)
    = 11,413,671,936; dense 1,189,085,184; shared 2,554,331,136; experts 653,908,770,816;
    router 58·1,835,264·2 = 212,890,624; norms (61·14,336 + 7,168)·2 = 1,763,328;
    embedding and lm_head 129,280·7,168·2 = 1,853,358,080 each."""
    ds = ModelSpec.from_hf_config(config("deepseek-v3"))
    assert ds.params == 671_026_419_200
    assert ds.active_params == 37_552_297_472
    assert ds.experts == 256 and ds.experts_per_token == 8
    assert ds.dtype == "fp8" and ds.compute_dtype == "fp8"
    assert ds.part_bytes() == {
        "attention": 11_413_671_936,
        "dense_mlp": 1_189_085_184,
        "shared_experts": 2_554_331_136,
        "experts": 653_908_770_816,
        "router": 212_890_624,
        "norms": 1_763_328,
        "embedding": 1_853_358_080,
        "lm_head": 1_853_358_080,
    }
    assert ds.weight_bytes == 672_987_229_184
    assert ds.expert_bytes == 653_908_770_816 / 256
    # a step reads all but the routed experts and the input embedding
    assert ds.dense_read_bytes == 672_987_229_184 - 653_908_770_816 - 1_853_358_080


def test_deepseek_v3_attention_flops_as_vllm_computes_mla():
    """Decode ("forward_mqa"): per head, scores over the 576-wide latent and a sum of 512
    values: 2·(512 + 64) + 2·512 = 2,176 FLOPs, x 128 heads x 61 layers = 16,990,208 per
    (query, cached token). Prefill ("forward_mha"): keys of 128 + 64, values of 128:
    2·192 + 2·128 = 640 a head, 640 / 2,176 = 320 / 1,088 of the decode figure."""
    ds = ModelSpec.from_hf_config(config("deepseek-v3"))
    assert ds.attention_flops_per_context == 16_990_208
    assert ds.prefill_attention_ratio == 320 / 1088


def test_latent_cache_is_on_every_gpu_of_a_tensor_parallel_replica():
    """vLLM keeps MLA's one latent head on every GPU: 8 x H200 hold 8 copies.
    Room: 8 x 141e9 x 0.92 − 672,987,229,184 = 1,037,760,000,000 − 672,987,229,184 =
    364,772,770,816 bytes; a sequence of 8,192 tokens: 8 x 70,272 x 8,192 =
    4,605,345,792 bytes: 79.2 → 79 sequences."""
    ds = ModelSpec.from_hf_config(config("deepseek-v3"))
    assert ds.tp_kv_factor(8) == 8
    assert max_batch(Hardware.from_fields("h200", 8), ds, 8192) == 79


def test_mla_config_carries_num_key_value_heads():
    ds = ModelSpec.from_hf_config(config("deepseek-v3"))
    assert ds.kv_heads == 128 and ds.heads == 128
    cfg = {k: v for k, v in config("deepseek-v3").items() if k != "num_key_value_heads"}
    assert ModelSpec.from_hf_config(cfg).kv_bytes_per_token == 70_272


def test_half_latent_attention_is_refused_naming_both_fields():
    cfg = {k: v for k, v in config("deepseek-v3").items() if k != "qk_rope_head_dim"}
    e = refused(cfg)
    assert e.field == "serving.model.config.qk_rope_head_dim"
    assert "kv_lora_rank" in e.message and "qk_rope_head_dim" in e.message
    with pytest.raises(InputError, match="kv_lora_rank"):
        ModelSpec(params=1e9, layers=2, hidden=64, heads=2, kv_heads=2, head_dim=32, kv_lora_rank=8)


def test_latent_attention_in_an_unknown_layout_is_refused():
    qwen = config("qwen2.5-7b-instruct")
    e = refused(dict(qwen, kv_lora_rank=512, qk_rope_head_dim=64))
    assert e.field.endswith("kv_lora_rank") and "deepseek_v3" in e.message


# ---------------------------------------------------------------- GPT-OSS-120B
def test_gpt_oss_120b_weight_bytes_by_component():
    """h = 2880, 64 heads and 8 KV heads of 64, 128 experts of 2880, vocabulary 201,088,
    36 layers; MXFP4 (4 bits + an 8-bit scale per 32 values = 0.53125 byte) on the
    experts' matrices only, bf16 (2 bytes) elsewhere.
    attention a layer: q 2880·4096 = 11,796,480, k and v 2880·512 = 1,474,560 each,
    o 4096·2880 = 11,796,480: 26,542,080, + biases (64 + 2·8)·64 + 2880 = 8,000 and 64
    sinks: 26,550,144 params, 53,100,288 bytes; x 36 = 1,911,610,368 bytes.
    experts a layer: 128 x (gate_up 2880·5760 = 16,588,800 + down 2880·2880 = 8,294,400)
    = 3,185,049,600 values x 0.53125 = 1,692,057,600 bytes, + biases 128·(5760 + 2880) =
    1,105,920 x 2 = 2,211,840: 1,694,269,440; x 36 = 60,993,699,840.
    router (2880·128 + 128) x 2 x 36 = 26,551,296; norms (36·5760 + 2880) x 2 = 420,480;
    embedding = lm_head = 201,088·2880·2 = 1,158,266,880.
    Total 65,248,815,744 bytes for 116,829,156,672 parameters (OpenAI's "116.8B")."""
    g = ModelSpec.from_hf_config(config("gpt-oss-120b"))
    assert g.params == 116_829_156_672
    assert g.part_bytes() == {
        "attention": 1_911_610_368,
        "experts": 60_993_699_840,
        "router": 26_551_296,
        "norms": 420_480,
        "embedding": 1_158_266_880,
        "lm_head": 1_158_266_880,
    }
    assert g.weight_bytes == 65_248_815_744
    assert g.expert_bytes == 60_993_699_840 / 128
    assert g.dense_read_bytes == 65_248_815_744 - 60_993_699_840 - 1_158_266_880
    # active: 4 of 128 experts, 36·4·24,891,840 = 3,584,424,960 instead of 36·128·that;
    # less the input embedding 579,133,440: 5,132,849,472 (OpenAI's "5.1B")
    assert g.active_params - g.embedding_params == 5_132_849_472
    # the experts are stored in 4 bits but multiply in bf16 (weight-only)
    assert g.dtype == "mxfp4" and g.compute_dtype == "bf16"


def test_gpt_oss_sliding_window_kv_below_and_above_the_window():
    """2 x 8 KV heads x 64 x 2 bytes = 2,048 bytes a token a layer, 36 layers: 73,728.
    Below the 128-token window (100 tokens) every layer holds all: 100 x 73,728 =
    7,372,800. Above it (1,000 tokens) the 18 sliding layers hold 128:
    (18 x 1,000 + 18 x 128) x 2,048 = 41,582,592 bytes (not 73,728,000)."""
    g = ModelSpec.from_hf_config(config("gpt-oss-120b"))
    assert g.windows == (128, 0) * 18
    assert g.kv_bytes_per_token == 73_728
    assert g.kv_bytes_at(100) == 7_372_800
    assert g.kv_bytes_at(1000) == 41_582_592


def test_gpt_oss_memory_cap_counts_the_window():
    """One H100: room 80e9 x 0.92 − 65,248,815,744 = 8,351,184,256 bytes. At 8,192 tokens
    a sequence holds 18 x (8,192 + 128) x 2,048 = 306,708,480 bytes: 27.2 → 27
    sequences (at 73,728 x 8,192 = 603,979,776 bytes without the window: 13)."""
    g = ModelSpec.from_hf_config(config("gpt-oss-120b"))
    assert max_batch(Hardware.from_fields("h100-sxm"), g, 8192) == 27


def test_layer_types_must_name_known_attention_kinds():
    cfg = config("gpt-oss-120b")
    cfg["layer_types"] = ["linear_attention"] + cfg["layer_types"][1:]
    e = refused(cfg)
    assert e.field == "serving.model.config.layer_types.0"
    cfg["layer_types"] = cfg["layer_types"][:10]
    assert refused(cfg).field == "serving.model.config.layer_types"


# ---------------------------------------------------------------- Qwen2 / Gemma-3 rules
def test_qwen2_window_not_in_effect_changes_nothing():
    """Qwen2.5-7B-Instruct gives sliding_window 131072 with use_sliding_window false:
    full attention everywhere, read by the original count (no components)."""
    q = ModelSpec.from_hf_config(config("qwen2.5-7b-instruct"))
    assert q.windows == () and q.parts == ()
    # 2 x 28 layers x 4 KV heads x 128 x 2 bytes
    assert q.kv_bytes_per_token == 57_344


def test_qwen2_windows_from_max_window_layers_when_in_effect():
    """Hugging Face's Qwen2Config: with use_sliding_window the layers from
    max_window_layers on slide; 20 of 28 → layers 20-27 at 4,096 tokens."""
    cfg = dict(
        config("qwen2.5-7b-instruct"),
        use_sliding_window=True,
        max_window_layers=20,
        sliding_window=4096,
    )
    q = ModelSpec.from_hf_config(cfg)
    assert q.windows == (0,) * 20 + (4096,) * 8
    # at 10,000 tokens: (20 x 10,000 + 8 x 4,096) x 2,048 bytes a token a layer
    # (2 x 4 KV heads x 128 x 2 bytes)
    assert q.kv_bytes_at(10_000) == (20 * 10_000 + 8 * 4096) * 2048


def test_gemma3_sliding_window_pattern():
    """Gemma-3's pattern p: layer i is global when (i + 1) is a multiple of p. A
    Gemma-3-shaped config of 12 layers (not a published one) with p = 6: layers 5 and 11
    global. Parameters by hand (h 640, 4 heads and 1 KV head of 256, I 2048, vocabulary
    1000, tied): attention 640·1024 + 2·640·256 + 1024·640 + q/k norms 512 = 1,638,912;
    MLP 3·640·2048 = 3,932,160; 4 norms 2,560: 5,573,632 a layer; 12 layers + final norm
    640 + embedding 640,000 = 67,524,224."""
    cfg = {
        "model_type": "gemma3_text",
        "hidden_size": 640,
        "intermediate_size": 2048,
        "num_hidden_layers": 12,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
    }
    g = ModelSpec.from_hf_config(cfg)
    assert g.windows == (512,) * 5 + (0,) + (512,) * 5 + (0,)
    assert g.params == 67_524_224 and g.embedding_params == 0


# ---------------------------------------------------------------- quantisation
QWEN3_30B_A3B = {  # Qwen/Qwen3-30B-A3B (Apache-2.0), as in tests/unit/steptime/test_specs.py
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
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def nvfp4(ignore: list[str]) -> dict:
    """A compressed-tensors NVFP4 quantization_config in the shape llm-compressor writes
    (format nvfp4-pack-quantized: float 4-bit weights in groups of 16)."""
    group = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}
    return {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": group}},
        "ignore": ignore,
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"},
    }


def test_nvfp4_with_an_ignore_list():
    """Qwen3-30B-A3B a layer: attention matrices 2048·4096·2 + 2048·512·2 = 18,874,368
    (+ q/k norms 256), experts 128·3·2048·768 = 603,979,776. NVFP4 = 4 bits + an fp8
    scale per 16 = 0.5625 byte. Attention ignored (re:.*self_attn.*): 48 x (18,874,368 +
    256) x 2 = 1,811,963,904 bytes; experts 48 x 603,979,776 x 0.5625 = 16,307,453,952.
    Not ignored: attention 48 x (18,874,368 x 0.5625 + 256 x 2) = 509,632,512. The fp8
    kv_cache_scheme: 2 x 48 x 4 x 128 x 1 = 49,152 bytes a token."""
    ignored = dict(QWEN3_30B_A3B, quantization_config=nvfp4(["lm_head", "re:.*self_attn.*"]))
    q = ModelSpec.from_hf_config(ignored)
    b = q.part_bytes()
    assert b["attention"] == 1_811_963_904 and b["experts"] == 16_307_453_952
    assert q.dtype == "nvfp4" and q.kv_bytes_per_token == 49_152
    plain = ModelSpec.from_hf_config(dict(QWEN3_30B_A3B, quantization_config=nvfp4(["lm_head"])))
    assert plain.part_bytes()["attention"] == 509_632_512
    # the routers and the embeddings stay bf16 either way: 48 x 2048 x 128 x 2
    assert b["router"] == plain.part_bytes()["router"] == 25_165_824
    # a dtype given stores every weight in it
    assert ModelSpec.from_hf_config(ignored, dtype="bf16").weight_bytes == q.params * 2


def test_modelopt_nvfp4_exclude_modules_by_wildcard():
    """ModelOpt's exclude_modules are wildcards: layer 0 left whole in bf16. Experts:
    47 x 603,979,776 x 0.5625 + 603,979,776 x 2 = 15,967,715,328 + 1,207,959,552."""
    quant = {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "exclude_modules": ["lm_head", "model.layers.0.*"],
    }
    q = ModelSpec.from_hf_config(dict(QWEN3_30B_A3B, quantization_config=quant))
    assert q.part_bytes()["experts"] == 15_967_715_328 + 1_207_959_552


def test_fp8_checkpoint_keeps_embeddings_and_norms_in_bf16():
    """Qwen3-30B-A3B in FP8 (quant_method fp8, 128 x 128 blocks): the embedding and
    lm_head, 151,936 x 2,048 = 311,164,928 each, stay 2 bytes a value."""
    cfg = dict(
        QWEN3_30B_A3B, quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]}
    )
    q = ModelSpec.from_hf_config(cfg)
    assert q.params == 30_532_122_624  # the count of tests/unit/steptime/test_specs.py
    assert q.part_bytes()["embedding"] == q.part_bytes()["lm_head"] == 311_164_928 * 2
    assert q.part_bytes()["experts"] == 48 * 603_979_776


@pytest.mark.parametrize(
    ("quant", "field"),
    [
        ({"quant_method": "gptq", "bits": 4}, "quantization_config.quant_method"),
        ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "quantization_config.quant_algo"),
    ],
)
def test_unknown_quantisation_is_refused_in_one_line(quant, field):
    e = refused(dict(QWEN3_30B_A3B, quantization_config=quant))
    assert e.field == f"serving.model.config.{field}"


# ---------------------------------------------------------------- tensor parallelism
def test_tensor_parallelism_must_divide_the_heads():
    """Qwen3-30B-A3B has 32 heads and 4 KV heads: TP 3 divides neither (refused); TP 8
    holds each KV head twice (8 / 4)."""
    q = ModelSpec.from_hf_config(QWEN3_30B_A3B)
    with pytest.raises(InputError) as e:
        max_batch(Hardware.from_fields("h100-sxm", 3), q, 1024)
    assert e.value.field == "serving.hardware.count" and "32 heads" in e.value.message
    assert q.tp_kv_factor(8) == 2 and q.tp_kv_factor(4) == 1


def test_a_config_without_new_shapes_keeps_the_original_count():
    """No window, no latent, no quantisation: the original reader (no components)."""
    q = ModelSpec.from_hf_config(QWEN3_30B_A3B)
    assert q.parts == () and q.windows == () and q.kv_lora_rank == 0
    assert q.weight_bytes == q.params * 2
