"""experiments/slurm/ on a real single-node Slurm started here (opt-in: `pytest -m slurm`).

The test writes a minimal slurm.conf (this host as the one node, no accounting, its own
state and spool folders and free ports), starts slurmctld and slurmd itself (as root),
queues a tiny sharded A/B with experiments/slurm/submit.sh (a 2-task array, two stub model
servers per task in place of vLLM on two GPUs, then the dependent merge) and checks that
the merged result is the unsharded run's. A second test lets one shard fail and recovers it
the documented way; a third cancels a shard whose servers are still loading. The servers a
job started are gone when it ends, and the daemons and every job process when the tests end.

Needs the Debian packages slurmctld, slurmd and slurm-client (`apt-get install slurmd
slurmctld`); skipped with the reason when they are missing or when not root.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parent.parent
GAMES = ROOT / "tests" / "games"
SLURM = ROOT / "experiments" / "slurm"
DUCK = str(Path(sys.executable).with_name("duck"))
# A tiny A/B whose pairs differ by pass: random (seed = pass) against the LLM agent, which
# the stub servers drive through the bundled games' solutions (one conversation per game
# and pass, so its runs are the same wherever they land).
AB_ARGS = ["--a", "experiments/random.toml", "--b", "experiments/baseline.toml",
           "--set-a", "play.max_actions=200", "--games", "tests/games", "--passes", "2", "--workers", "1",
           "--boot", "500"]
STUB_CMD = f"{DUCK} stub-server --solutions {GAMES} --port {{port}}"
DAEMONS = ("slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "scancel", "squeue")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, **kw)


def _pids_with(needle: bytes) -> list[int]:
    """Processes whose environment or command line holds `needle` (this test's jobs)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes() or needle in (d / "cmdline").read_bytes():
                out.append(int(d.name))
        except OSError:
            continue
    return out


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node Slurm of this host; yields the environment its clients need."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.skip(f"Slurm not installed ({', '.join(missing)} missing): apt-get install slurmd slurmctld")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to launch jobs")
    d = tmp_path_factory.mktemp("slurm")
    (d / "state").mkdir()
    (d / "spool").mkdir()
    host = socket.gethostname().split(".")[0]
    conf = d / "slurm.conf"
    conf.write_text(f"""\
ClusterName=ducktest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/none
CredType=cred/none
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    env = dict(os.environ, SLURM_CONF=str(conf))
    for k in [k for k in env if k.startswith(("SLURM_", "SBATCH_")) and k != "SLURM_CONF"]:
        del env[k]  # (a test run inside a Slurm job must not talk to that cluster)
    daemons = []
    for exe, extra in (("slurmctld", ["-c"]), ("slurmd", ["-N", host])):  # -c: no old state
        with open(d / f"{exe}.out", "wb") as log:
            daemons.append(subprocess.Popen([exe, "-D", "-f", str(conf), *extra], env=env, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    try:
        deadline = time.monotonic() + 60
        while True:
            r = _run(["sinfo", "-h", "-o", "%t"], env)
            if r.returncode == 0 and r.stdout.strip() == "idle":
                break
            dead = [p.args[0] for p in daemons if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "".join((d / f).read_text(errors="replace")[-2000:] for f in ("slurmctld.out", "slurmd.out"))
                pytest.fail(f"Slurm did not come up ({', '.join(dead) or 'time-out'}): {r.stdout}{r.stderr}\n{logs}")
            time.sleep(0.5)
        yield env
    finally:
        _run(["scancel", "--partition", "test"], env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = _run(["squeue", "-h"], env)
            if r.returncode != 0 or not r.stdout.strip():
                break
            time.sleep(1)
        for p in reversed(daemons):
            _stop(p)
        # jobs in the test's folders: anything left (it should not be) is ended by id
        for pid in _pids_with(str(d).encode()) + _pids_with(f"SLURM_CONF={conf}".encode()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module")
def unsharded(tmp_path_factory) -> dict:
    """The same A/B without Slurm or shards: one `duck ab` against two fresh stub servers."""
    out = tmp_path_factory.mktemp("unsharded")
    servers = [subprocess.Popen([DUCK, "stub-server", "--solutions", str(GAMES), "--port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
               for _ in range(2)]
    try:
        urls = json.dumps([json.loads(s.stdout.readline())["url"] + "/v1" for s in servers])
        r = subprocess.run([DUCK, "ab", *AB_ARGS, "--set-a", f"model.urls={urls}", "--set-b",
                            f"model.urls={urls}", "--out", str(out)], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        for s in servers:
            _stop(s)
    return json.loads((out / "ab.json").read_text())


def _submit(env: dict[str, str], out: Path, **extra: str) -> dict:
    env = env | {"DUCK": DUCK, "DUCK_AB_GPUS": "0,1", "DUCK_AB_SERVER_CMD": STUB_CMD, "DUCK_AB_READY_S": "60",
                 "DUCK_AB_MERGE_ARGS": "--boot 500"} | extra
    r = _run(["bash", str(SLURM / "submit.sh"), str(out), "2", *AB_ARGS], env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _job_state(env: dict[str, str], job: str) -> str:
    r = _run(["scontrol", "-o", "show", "job", job], env)
    fields = dict(f.split("=", 1) for f in r.stdout.split() if "=" in f)
    return fields.get("JobState", "?")


def _wait(env: dict[str, str], ids: dict, timeout: float = 300) -> str:
    """The merge job's final state (it runs after the whole array)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _job_state(env, ids["merge"])
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return state
        time.sleep(1)
    raise AssertionError(f"merge job still {state} after {timeout} s; logs:\n{_logs(ids)}")


def _logs(ids: dict) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                     for p in sorted(Path(ids["logs"]).glob("*.out")))


def _same_result(got: dict, want: dict) -> None:
    assert got["n_pairs"] == want["n_pairs"] == 6
    for k in ("delta", "ci95", "p_value", "a_mean", "b_mean"):
        assert got[k] == pytest.approx(want[k]), k
    assert {g: (s["a"], s["b"]) for g, s in got["games"].items()} == \
        {g: (s["a"], s["b"]) for g, s in want["games"].items()}


def _shard_urls(shard: Path) -> set[str]:
    """The servers arm B's runs of a shard talked to (checking that the model really played)."""
    urls = set()
    for f in sorted((shard / "b").rglob("records/*.jsonl")):
        lines = [json.loads(x) for x in f.read_text().splitlines()]
        assert any(x.get("kind") == "model" for x in lines), f"{f}: no model request"
        assert not any(x.get("kind") == "error" for x in lines), f"{f}: an error"
        urls.add(lines[0]["config"]["url"])
    return urls


def test_sharded_ab_on_slurm_merges_to_the_unsharded_result(slurm, unsharded, tmp_path: Path):
    out = tmp_path / "ab"
    ids = _submit(slurm, out)
    state = _wait(slurm, ids)
    assert state == "COMPLETED", _logs(ids)
    for i in ("1", "2"):
        assert _job_state(slurm, f"{ids['array']}_{i}") == "COMPLETED"
    merged = json.loads((out / "ab.json").read_text())
    _same_result(merged, unsharded)
    assert merged["records_copied"] == 12 and len(merged["merged_from"]) == 2
    _same_result(json.loads((out / "ab-stats.json").read_text()), unsharded)
    # both tasks ran on the one node at once: each used both of its own two servers
    used = [_shard_urls(out / "shards" / i) for i in ("1", "2")]
    assert all(len(u) == 2 for u in used) and not used[0] & used[1]
    # the servers and duck ab of each task were stopped when it ended
    time.sleep(1)
    assert _pids_with(f"DUCK_AB_OUT={out}".encode()) == []


def test_a_failed_shard_is_named_then_resumed_and_merged(slurm, unsharded, tmp_path: Path):
    out = tmp_path / "ab"
    # task 2's servers never come up: that shard fails, the merge keeps shard 1 and fails
    broken = f'[ "$SLURM_ARRAY_TASK_ID" != 2 ] || exit 3; {STUB_CMD}'
    ids = _submit(slurm, out, DUCK_AB_SERVER_CMD=broken)
    assert _wait(slurm, ids) == "FAILED"
    assert _job_state(slurm, f"{ids['array']}_2") == "FAILED"
    assert "server 0 exited before it answered" in _logs(ids)
    merge_log = next(Path(ids["logs"]).glob(f"merge.job{ids['merge']}.out")).read_text()
    assert "shard(s) 2 did not finish: resubmit them with DUCK_AB_ARRAY=2" in merge_log
    partial = json.loads((out / "ab.json").read_text())
    assert partial["n_pairs"] == 3
    shard1 = {f: f.stat().st_mtime_ns for f in (out / "shards" / "1").rglob("records/*.jsonl")}
    # the documented recovery: resubmit only task 2 (its count comes from shards/count)
    again = _submit(slurm, out, DUCK_AB_ARRAY="2")
    assert _wait(slurm, again) == "COMPLETED", _logs(again)
    _same_result(json.loads((out / "ab.json").read_text()), unsharded)
    assert {f: f.stat().st_mtime_ns for f in (out / "shards" / "1").rglob("records/*.jsonl")} == shard1
    time.sleep(1)
    assert _pids_with(f"DUCK_AB_OUT={out}".encode()) == []


def test_a_cancelled_shard_stops_its_servers(slurm, tmp_path: Path):
    out = tmp_path / "ab"
    # servers that never answer (a model still loading): the tasks wait for them
    ids = _submit(slurm, out, DUCK_AB_SERVER_CMD="exec sleep 300 # {port}", DUCK_AB_READY_S="120")
    needle = f"DUCK_AB_OUT={out}".encode()
    deadline = time.monotonic() + 60
    while len(_pids_with(needle)) < 6 and time.monotonic() < deadline:  # 2 tasks x (script + 2 servers)
        time.sleep(0.5)
    running = _pids_with(needle)
    assert len(running) >= 6, _logs(ids)
    r = _run(["scancel", ids["array"]], slurm)
    assert r.returncode == 0, r.stderr
    assert _wait(slurm, ids) in ("CANCELLED", "FAILED")  # the merge runs after any end, finds nothing
    for i in ("1", "2"):
        assert _job_state(slurm, f"{ids['array']}_{i}") == "CANCELLED"
    deadline = time.monotonic() + 30
    while _pids_with(needle) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _pids_with(needle) == [], _logs(ids)
    assert all("servers stopped" in p.read_text() for p in Path(ids["logs"]).glob("shard-*.out")), _logs(ids)
