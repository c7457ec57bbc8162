"""The doctor's boot without a network (issue 35): no route out; what vllm.log says was fetched or built.

Kaggle's rerun has no network at all, so a boot that downloads a kernel or a file works on a
development machine and fails (or stalls on retries) there. `isolate()` moves the doctor itself,
and so the vLLM server and the games it starts after, into a network namespace of its own: only
a loopback, up (the doctor talks to the server over 127.0.0.1), no default route;
`unshare(CLONE_NEWNET)` as root, else a user namespace mapping this user to itself. Where neither
is permitted it says so and the step fails (`duck doctor --network host` then runs on the
machine's own network, knowingly).

`scan(text)` reads a vllm.log for the lines the pinned vLLM 0.33.0 and FlashInfer 0.7.2 write
when they fetch or compile at start-up (`SIGNS`; each names the file of its log call, and
tests/test_doctor.py checks the fragment against the pinned venv). What they do without the
precompiled kernels, read in their source, and what the dataset ships instead: docs/serving.md,
"FlashInfer offline".
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Sign:
    kind: str  # "download", "compile", "network" or "kernels" (each fails the doctor), "note" (reported)
    pattern: str  # a regular expression over one vllm.log line
    source: str  # the file under site-packages whose log call writes it
    literal: str  # a fragment of that call's text (checked against the pinned venv)


SIGNS = (
    Sign("download", r"Fetching \S+ from https?://", "flashinfer/jit/cubin_loader.py", "Fetching {file_name} from {uri}"),
    Sign("download", r"Downloading \S+: attempt \d+ failed", "flashinfer/jit/cubin_loader.py", ": attempt {attempt + 1} failed"),
    Sign("download", r"Max retries reached\. Download failed", "flashinfer/jit/cubin_loader.py",
         "Max retries reached. Download failed."),
    Sign("download", r"File downloaded successfully", "flashinfer/jit/cubin_loader.py", "File downloaded successfully"),
    Sign("download", r"refusing to download", "flashinfer/jit/cubin_loader.py", "refusing to download"),
    Sign("compile", r"Building JIT module \S+", "flashinfer/jit/core.py", "Building JIT module %s"),
    Sign("compile", r"Ninja build failed", "flashinfer/jit/cpp_ext.py", "Ninja build failed."),
    Sign("compile", r"JIT compilation is disabled via FLASHINFER_DISABLE_JIT", "flashinfer/jit/core.py",
         "JIT compilation is disabled via FLASHINFER_DISABLE_JIT"),
    Sign("compile", r"JIT compiling \S+", "vllm/third_party/fmha_sm100/jit.py", "JIT compiling %s"),
    Sign("kernels", r"FlashInfer's precompiled kernels are missing or do not match", "vllm/utils/flashinfer.py",
         "FlashInfer's precompiled kernels are missing or do not match"),
    Sign("note", r"FlashInfer kernels are disabled", "vllm/utils/flashinfer.py", "FlashInfer kernels are disabled"),
    # What any library's HTTP client says when it tried to go out (urllib3, requests, huggingface_hub).
    Sign("network", r"Network is unreachable|Temporary failure in name resolution|Name or service not known"
         r"|Max retries exceeded with url|Failed to establish a new connection|couldn't connect to 'https?://",
         "", ""),
)
FAILING = ("download", "compile", "network", "kernels")
_COMPILED = [(s, re.compile(s.pattern)) for s in SIGNS]


def scan(text: str, limit: int = 20) -> dict[str, Any]:
    """The SIGNS in a vllm.log: `ok` when none that fails is there; the lines, by kind."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        for sign, rx in _COMPILED:
            if rx.search(line):
                found.setdefault(sign.kind, []).append(line.strip()[:300])
                break
    bad = [k for k in FAILING if k in found]
    return {"ok": not bad, "failing": bad, "lines": {k: v[:limit] for k, v in found.items()},
            "counts": {k: len(v) for k, v in found.items()}}


def scan_logs(paths: list[Path]) -> dict[str, Any]:
    """`scan` over every log the doctor's servers wrote (one boot each)."""
    out: dict[str, Any] = {}
    for p in paths:
        try:
            out[p.name] = scan(p.read_text(errors="replace"))
        except OSError as e:
            out[p.name] = {"ok": False, "failing": ["unread"], "error": str(e)}
    bad = sorted({k for r in out.values() for k in r.get("failing", [])})
    return {"ok": not bad and bool(out), "failing": bad, "logs": out}


# -- the namespace ------------------------------------------------------------------------

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def default_routes() -> list[str]:
    """The default routes this namespace has (IPv4 and IPv6, from /proc/net)."""
    out = []
    try:
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            f = line.split()
            if len(f) > 2 and f[1] == "00000000":
                out.append(f"ipv4 via {f[0]}")
    except OSError:
        pass
    try:
        for line in Path("/proc/net/ipv6_route").read_text().splitlines():
            f = line.split()
            if len(f) == 10 and f[0] == "0" * 32 and f[1] == "00" and f[9] != "lo":
                out.append(f"ipv6 via {f[9]}")
    except OSError:
        pass
    return out


def probe(host: str = "1.1.1.1", port: int = 443, timeout_s: float = 3.0) -> str:
    """What connecting out gives: "connected" (a route out), or the error."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return "connected"
    except OSError as e:
        return f"{type(e).__name__}: {e}"


def state() -> dict[str, Any]:
    names = [n for _, n in socket.if_nameindex()]
    routes = default_routes()
    out = probe()
    return {"interfaces": names, "default_routes": routes, "probe": out,
            "isolated": not routes and out != "connected" and names == ["lo"]}


def _user_namespace() -> None:
    """A user namespace mapping this user to itself (not to root: what the doctor starts runs
    as the same user as before, the sandbox included), and a network namespace it owns; the
    capabilities the creator holds in it until its next exec bring the loopback up."""
    uid, gid = os.getuid(), os.getgid()
    os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNET)
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def isolate(mode: str = "none") -> dict[str, Any]:
    """`mode` "none": this process into a namespace with no route out (loopback up);
    "host": left on the machine's network (the step says so). Returns the step's result."""
    if mode == "host":
        return {"ok": True, "how": "the machine's own network (--network host)", **state()}
    tried = []
    for how, enter in (("network namespace (unshare CLONE_NEWNET)", lambda: os.unshare(os.CLONE_NEWNET)),
                       ("user + network namespace (unshare CLONE_NEWUSER|CLONE_NEWNET)", _user_namespace)):
        try:
            enter()
        except OSError as e:
            tried.append(f"{how}: {e}")
            continue
        try:
            _loopback_up()
        except OSError as e:
            return {"ok": False, "how": how, "error": f"loopback not up: {e}", **state()}
        now = state()
        return {"ok": now["isolated"], "how": how, **now}
    return {"ok": False, "isolated": False, "how": None,
            "error": "no network namespace here (" + "; ".join(tried) + "): run the doctor as root, or "
                     "pass --network host on a machine whose own network is cut"}


if __name__ == "__main__":  # python -m devkit.doctor.offline LOG...: the scan of any vllm.log (boot-dummy's too)
    import json
    import sys
    doc = scan_logs([Path(p) for p in sys.argv[1:]])
    print(json.dumps(doc, indent=1))
    sys.exit(0 if doc["ok"] else 1)
