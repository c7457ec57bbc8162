"""Serving profiles and their memory plan (duck.config.profiles) and how the config resolves from it."""

from __future__ import annotations

import json

import pytest

from duck.config import profiles
from duck.config import ConfigError, load_config, with_values


def test_the_plans_reproduce_the_pools_and_slots_the_field_measured():
    fn = profiles.plan("flash-next")
    assert fn.kv_bytes_per_token == 12 * 1024  # 12 attention layers x 2 KV heads x 256, FP8
    assert abs(fn.kv_tokens - 1_000_000) / 1_000_000 < 0.05  # FIELD §4: ~1.0M tokens at 0.96
    assert 50 < fn.state_mib_per_slot < 60  # ~56 MB of recurrent state per slot
    assert (fn.window, fn.slots, fn.max_num_seqs) == (131072, 10, 11)  # Franzen: 10 x 128K
    assert fn.slots * fn.mean_tokens_per_slot <= fn.kv_tokens < (fn.slots + 1) * fn.mean_tokens_per_slot
    bf16 = profiles.plan("qwen3.8-27b", kv_cache_dtype="auto")
    fp8 = profiles.plan("qwen3.8-27b")
    assert bf16.kv_bytes_per_token == 64 * 1024 and fp8.kv_bytes_per_token == 32 * 1024
    assert abs(bf16.kv_tokens - 851_000) / 851_000 < 0.03  # measured: 851K BF16, 1.67M FP8
    assert abs(fp8.kv_tokens - 1_670_000) / 1_670_000 < 0.03
    assert profiles.plan("qwen3.6-27b").kv_cache_dtype == "auto"  # FP8 KV corrupts 3.6 (vllm#26646)
    for p in profiles.PROFILES:
        assert profiles.plan(p).problems == []


def test_a_smaller_context_fits_more_slots_up_to_the_cap():
    p70 = profiles.plan("flash-next", context_tokens=71680)
    assert p70.slots_fit > 16 and p70.slots == 16  # Siriki's 16 x 70K; the cap binds
    assert profiles.plan("flash-next", context_tokens=71680, slots=12).slots == 12


def test_what_does_not_fit_is_listed_and_check_raises():
    too_many = profiles.plan("flash-next", slots=20)
    assert too_many.problems and "at most 10 slots fit" in too_many.problems[0]
    with pytest.raises(profiles.ProfileError, match="does not fit"):
        too_many.check()
    small_card = profiles.plan("flash-next", gpu_mib=48 * 1024)
    assert any("exceed" in x for x in small_card.problems)
    assert profiles.plan("flash-next", output_tokens=200_000, window=131072).problems
    table = profiles.plan("flash-next", host_gb=100)
    assert any("host RAM" in x for x in table.problems)
    with pytest.raises(profiles.ProfileError, match="unknown serving profile"):
        profiles.plan("qwen9")


def test_the_host_ram_plan_sets_the_kernel_quota():
    roomy = profiles.plan("flash-next", host_gb=176)
    tight = profiles.plan("flash-next", host_gb=150)
    assert roomy.kernel_disk_mb == 256  # the cap
    assert 16 <= tight.kernel_disk_mb < 256  # what is left beside the n-gram table, per kernel
    assert tight.host["tmpfs_gb"] <= 150 * 0.9 - 102 - 12


def test_the_checkpoints_own_config_json_is_read(tmp_path):
    layer_types = ["linear_attention" if i % 4 != 3 else "full_attention" for i in range(8)]
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {
        "num_hidden_layers": 8, "layer_types": layer_types, "num_key_value_heads": 2, "head_dim": 256,
        "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}}))
    p = profiles.plan("flash-next", model_path=str(tmp_path))
    assert p.arch_from.endswith("config.json") and p.kv_bytes_per_token == 2 * 2 * 2 * 256
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(profiles.ProfileError, match="config.json"):
        profiles.plan("flash-next", model_path=str(tmp_path))


def test_the_config_takes_its_unset_counts_from_the_plan_and_replans_on_change():
    cfg = load_config()
    assert cfg.model.profile == "flash-next" and cfg.model.name == "Qwen3.8-Flash-Next"
    assert (cfg.agent.context_tokens, cfg.scheduler.slots, cfg.model.serve.max_num_seqs) == (131072, 10, 11)
    assert cfg.model.serve.kv_cache_dtype == "fp8" and cfg.model.max_output_tokens == 12288
    assert "scheduler.slots" in cfg.derived and cfg.plan.slots == 10
    old = load_config(overrides=["agent.context_tokens=32768"])  # the Milestone-1 budget, for an A/B
    assert old.model.serve.max_model_len == 32768 and old.scheduler.slots == 16
    assert "agent.context_tokens" not in old.derived
    q36 = with_values(cfg, {"model.profile": "qwen3.6-27b"})
    assert (q36.model.name, q36.model.serve.kv_cache_dtype, q36.agent.context_tokens) == ("Qwen3.6-27B-FP8", "auto",
                                                                                           65536)
    assert with_values(cfg, {"scheduler.slots": 4}).model.serve.max_num_seqs == 5
    with pytest.raises(ConfigError, match="model.profile"):
        load_config(overrides=["model.profile=qwen9"])
