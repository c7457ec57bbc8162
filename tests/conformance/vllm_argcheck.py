"""Parse a `vllm serve` command line with the installed vLLM's own CLI parser, as `vllm`
itself builds it (vllm/entrypoints/cli/main.py: every subcommand registered, then the
subcommand's `validate`), without running it. Run by the vLLM venv's python:

    echo '["vllm", "serve", "MODEL", "--flag", ...]' | python tests/conformance/vllm_argcheck.py

Prints the parsed values as JSON and exits 0; an unknown or invalid flag exits 2 with
argparse's message on stderr, exactly as `vllm serve` would before loading anything.
"""

import json
import sys


def main() -> int:
    argv = json.load(sys.stdin)
    # No GPU here: the CPU platform, as vLLM's own `vllm bench` does when none is detected
    # (the parser's defaults build a DeviceConfig, which needs a platform).
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform
    vllm.platforms._current_platform = CpuPlatform()
    import vllm.entrypoints.cli.benchmark.main
    import vllm.entrypoints.cli.collect_env
    import vllm.entrypoints.cli.launch
    import vllm.entrypoints.cli.openai
    import vllm.entrypoints.cli.run_batch
    import vllm.entrypoints.cli.serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    cmds = {}
    for module in (vllm.entrypoints.cli.openai, vllm.entrypoints.cli.serve, vllm.entrypoints.cli.launch,
                   vllm.entrypoints.cli.benchmark.main, vllm.entrypoints.cli.collect_env,
                   vllm.entrypoints.cli.run_batch):
        for cmd in module.cmd_init():
            cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
            cmds[cmd.name] = cmd
    args = parser.parse_args(argv[1:])
    cmds[args.subparser].validate(args)
    cc = args.compilation_config
    out = {k: getattr(args, k, None) for k in (
        "subparser", "model_tag", "served_model_name", "host", "port", "max_model_len", "gpu_memory_utilization",
        "max_num_seqs", "max_num_batched_tokens", "stream_interval", "enable_prefix_caching", "enable_prompt_tokens_details",
        "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "limit_mm_per_prompt", "kv_cache_dtype",
        "chat_template", "mm_processor_kwargs", "default_chat_template_kwargs", "speculative_config",
        "engram_config", "linear_backend", "prefix_match_unit", "attention_backend", "mamba_cache_mode")}
    for k in ("speculative_config", "engram_config"):  # (parsed into dicts or config objects by version)
        v = out.get(k)
        if v is not None and not isinstance(v, dict):
            out[k] = {f: getattr(v, f) for f in ("method", "num_speculative_tokens", "cpu_offload") if hasattr(v, f)}
    out["cudagraph_mode"] = str(getattr(cc, "cudagraph_mode", None) if not isinstance(cc, dict)
                                else cc.get("cudagraph_mode"))
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
