"""A tiny stand-in for the model folder, for vLLM's own serving code on a CPU.

Written at run time into a temporary folder (nothing of it is committed): a byte-level BPE
tokenizer whose added tokens are Qwen's, split into special (`<|im_start|>`, `<|image_pad|>`,
... : dropped from detokenized text) and not special (`<think>`, `<tool_call>`, ... : kept
in text, as the parsers need). Without a corpus it has no merges (every byte one token);
with one (`corpus`: the Duck traces' code and text) its merges are trained on it, so that a
token is about as long as Qwen's on code (2.2-2.7 characters, FIELD §3) and a streamed
chunk of N tokens holds about as much text as the real model's would; that is what decides
how many tool-call tags one chunk of a stream carries.

The config has the serving profile's shape (`shape`):
* "flash-next": `Qwen4ExpForConditionalGeneration` (Qwen3.8-Flash-Next, vLLM 0.33's
  `vllm.models.qwen4_exp`): 48 layers, every 4th attending, 2 KV heads x 256, DeltaNet
  16 x 48 heads x 128, hyper-connections, PLE layers and an MTP layer; tiny widths;
* "qwen3.6": `Qwen3_5ForConditionalGeneration` (Qwen3.6/3.8-27B), the architecture vLLM 0.19
  also knows (for measuring that version's parsers): 4 tiny layers;
* "27b": the same architecture with the 27B profiles' layer pattern (64 layers, every 4th
  attending, 4 KV heads x 256, DeltaNet 16 x 48 heads x 128, an MTP layer), for vLLM's
  engine config (tests/conformance/vllm_engine_config.py).
Both with the vision token ids of this tokenizer and the Qwen3-VL image processor's config
(patch 16, merge 2 and Qwen3.x's pixel bounds); and, optionally, a chat template. No
weights: vLLM's render path never loads them.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
           "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
           "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
NOT_SPECIAL = ["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def _byte_vocab() -> dict[str, int]:
    """GPT-2's byte-to-unicode map: 256 printable symbols, one per byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): i for i, c in enumerate(cs)}


def _tokenizer(corpus: list[str] | None, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    if not corpus:
        tok = Tokenizer(models.BPE(vocab=_byte_vocab(), merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    else:  # GPT-2's pre-split (as Qwen's), merges learnt from the corpus; every byte still encodes
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.train_from_iterator(corpus, trainers.BpeTrainer(
            vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.decoder = decoders.ByteLevel()
    return tok


def _text_config(shape: str, vocab: int, eos: int) -> dict:
    if shape == "qwen3.6":
        return {"vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
                "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
                "max_position_embeddings": 262144, "eos_token_id": eos}
    if shape == "27b":  # the 27B profiles' pattern (duck.config.profiles.QWEN_27B): 64 layers, every 4th attending
        layers = 64
        return {"model_type": "qwen3_5_text", "vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": layers,
                "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
                "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
                "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mtp_num_hidden_layers": 1,
                "max_position_embeddings": 262144, "eos_token_id": eos,
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                                    "mrope_section": [11, 11, 10], "mrope_interleaved": True}}
    # Flash-Next's layer pattern and attention shapes (duck.config.profiles.FLASH_NEXT); tiny widths.
    layers = 48
    return {"model_type": "qwen4_exp_text", "vocab_size": vocab, "hidden_size": 64, "num_hidden_layers": layers,
            "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 256,
            "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32, "hc_count": 4, "hc_lowrank": 8,
            "ple_layer_ids": [1, 2, 5, 6], "ple_embed_dim": 64, "ngram_size": 3, "heads_per_ngram": 8,
            "ngram_vocab_size_base": 1000, "mtp_num_hidden_layers": 1,
            "max_position_embeddings": 262144, "eos_token_id": eos,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                                "mrope_section": [11, 11, 10], "mrope_interleaved": True}}


def write_model_dir(path: Path, chat_template: str | None = None, corpus: list[str] | None = None,
                    shape: str = "flash-next", vocab_size: int = 1024) -> dict[str, int]:
    """Write the folder; returns the added tokens' ids."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(corpus, vocab_size)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NOT_SPECIAL])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   model_max_length=262144)
    fast.save_pretrained(str(path))
    ids = {t: tok.token_to_id(t) for t in SPECIAL + NOT_SPECIAL}
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    cfg["tokenizer_class"] = "Qwen2TokenizerFast"  # what Qwen's folders name (the VL processor insists)
    if chat_template is not None:
        (path / "chat_template.jinja").write_text(chat_template)
    (path / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    vocab = tok.get_vocab_size()
    arch, model_type = (("Qwen3_5ForConditionalGeneration", "qwen3_5") if shape in ("qwen3.6", "27b")
                        else ("Qwen4ExpForConditionalGeneration", "qwen4_exp"))
    (path / "config.json").write_text(json.dumps({
        "architectures": [arch], "model_type": model_type,
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "text_config": _text_config(shape, vocab, ids["<|im_end|>"]),
        "vision_config": {"depth": 1, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2,
                          "out_hidden_size": 64, "patch_size": 16, "spatial_merge_size": 2,
                          "temporal_patch_size": 2, "in_channels": 3, "num_position_embeddings": 2304},
    }, indent=1))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [ids["<|im_end|>"]]}))
    image = {"processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessorFast",
             "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
             "size": {"shortest_edge": 65536, "longest_edge": 16777216},
             "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_rescale": True,
             "rescale_factor": 1 / 255, "do_normalize": True, "do_resize": True, "do_convert_rgb": True}
    (path / "preprocessor_config.json").write_text(json.dumps(image, indent=1))
    video = dict(image, video_processor_type="Qwen3VLVideoProcessor", fps=2, min_frames=4, max_frames=768,
                 size={"shortest_edge": 4096, "longest_edge": 25165824})
    video.pop("image_processor_type")
    (path / "video_preprocessor_config.json").write_text(json.dumps(video, indent=1))
    return ids
