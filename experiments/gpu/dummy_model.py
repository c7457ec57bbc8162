"""A reduced Flash-Next-shaped model folder for `vllm serve --load-format dummy` (no weights).

    python experiments/gpu/dummy_model.py OUT_DIR [--layers 4]

Real widths where they are known (Qwen4ExpTextConfig's defaults, FIELD §4's attention and
DeltaNet shapes: 2 KV heads x 256, 16 key / 48 value heads x 128), a few layers (every 4th
attends, so 4 layers = 3 DeltaNet + 1 attention), PLE layers with a reduced n-gram table
(the real one is 51B parameters; here ~0.5 GB so that `--engram-config cpu_offload` has
something to pin), one MTP layer, the W4A16 AutoRound quantisation config (4-bit experts,
group 128), and the stand-in tokenizer of tests/conformance/qwen_tiny.py (Qwen's added tokens)
with the Qwen3.8 template. What booting it shows: that vLLM 0.33 builds this architecture
with the profile's flags (FP8 KV, MTP, the n-gram offload, prefix caching on a hybrid
model) on this GPU, its KV pool and block sizes, and its streaming; not the model's speed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "conformance"))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--template", default=str(REPO.parent / "shared" / "qwen3.8" / "chat_template.jinja"))
    a = p.parse_args()
    from qwen_tiny import write_model_dir
    out = Path(a.out)
    template = Path(a.template).read_text() if Path(a.template).is_file() else None
    write_model_dir(out, template, shape="flash-next")
    cfg = json.loads((out / "config.json").read_text())
    t = cfg["text_config"]
    n = a.layers
    t.update({"hidden_size": 2048, "num_hidden_layers": n, "num_attention_heads": 16,
              "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)],
              "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
              "shared_expert_intermediate_size": 512, "hc_count": 4, "hc_lowrank": 320,
              "ple_layer_ids": [1], "ple_embed_dim": 2048, "ngram_vocab_size_base": 100_000,
              "vocab_size": max(t["vocab_size"], 1024)})
    cfg["vision_config"]["out_hidden_size"] = 2048  # (the merger's output is the text width)
    cfg["quantization_config"] = {"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True,
                                  "packing_format": "auto_round:auto_gptq", "data_type": "int",
                                  "block_name_to_quantize": "model.language_model.layers"}
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    print(json.dumps({"model_dir": str(out), "layers": n, "layer_types": t["layer_types"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
