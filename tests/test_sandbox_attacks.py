"""The sandbox as a boundary (issues 14 and 30): the attack snippets of tests/attacks.py against
a real kernel on a copy of a bundled game with a canary planted in its source and solution.

Here each snippet's tool message is checked one by one (nothing escaped, no canary, a bounded
message, the kernel alive afterwards, restarted when the host had to, not restarted when the
attack must simply be refused); tests/test_attacks_play.py runs the same snippets through
`duck stub-server` and `duck play --policy llm`.

The games and the run folder sit in a world-readable folder, as a user's checkout and Kaggle's
/kaggle/input are: what keeps the worker out is the sandbox, never pytest's private tmp dir.
Every test here runs in the posture this process is in; `test_the_attacks_hold_in_the_other_postures`
runs this whole file again as root without CAP_SYS_ADMIN, and its part that CAP_SYS_PTRACE changes
without that capability as well (tests/posture.py), so CI exercises three postures on every
submission.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

import posture
from attacks import ATTACKS, UNGUARD
from conftest import BUNDLED, ROOT, alive
from duck.config import KernelConfig
from duck.game.source import GameSource
from duck.play.record import RecordWriter, read_record
from duck.play.session import Session
from duck.sandbox import process
from duck.sandbox.wall import isolation
from duck.sandbox.host import Kernel
from duck.sandbox.render import OUTPUT_CHARS

MESSAGE_LIMIT = 64_000  # characters of one tool message, whatever the snippet did


def canary_games(dst: Path, game: str = "zs01") -> tuple[Path, str]:
    """A copy of one bundled game whose source and solution hold a unique canary string."""
    canary = f"CANARY-{uuid.uuid4().hex}"
    shutil.copytree(BUNDLED / game, dst / game)
    for py in (dst / game).rglob("*.py"):
        py.write_text(py.read_text() + f"\n# {canary}\n")
    for sol in (dst / game).rglob("solution.json"):
        doc = json.loads(sol.read_text())
        sol.write_text(json.dumps(doc | {"note": canary}))
    return dst, canary


@pytest.fixture
def open_place():
    """A folder every user can read (0755 all the way up), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="duck-open-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    return s


def accepted(s: socket.socket) -> bool:
    try:
        s.accept()[0].close()
        return True
    except BlockingIOError:
        return False


class Targets:
    """What the snippets aim at: a TCP port, a named and an abstract AF_UNIX socket (every user
    may connect to both), the checkout, the games and the run folder."""

    def __init__(self, folder: Path, games: Path, run: Path) -> None:
        self.tcp = listener()
        self.unix_path = str(folder / "service.sock")
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(self.unix_path)
        os.chmod(self.unix_path, 0o777)
        self.abstract_name = f"duck-test-{uuid.uuid4().hex}"
        self.abstract = socket.socket(socket.AF_UNIX)
        self.abstract.bind("\0" + self.abstract_name)
        for s in (self.unix, self.abstract):
            s.listen(8)
            s.setblocking(False)
        self.where = {"repo": str(ROOT), "games": str(games), "run": str(run), "port": self.tcp.getsockname()[1],
                      "unix": self.unix_path, "abstract": self.abstract_name}

    def reached(self) -> list[str]:
        return [name for name, s in (("tcp", self.tcp), ("unix", self.unix), ("abstract", self.abstract))
                if accepted(s)]

    def close(self) -> None:
        for s in (self.tcp, self.unix, self.abstract):
            s.close()


def new_kernel(folder: Path, cfg: KernelConfig, max_actions: int = 200) -> tuple[Kernel, Path, str]:
    games, canary = canary_games(folder / "games")
    source = GameSource.offline(games)
    gid = source.game_ids()[0]
    g = source.make(gid)
    (folder / "records").mkdir(exist_ok=True)
    (folder / "conversations").mkdir(exist_ok=True)
    (folder / "conversations" / f"{gid}.jsonl").write_text('{"role": "user", "content": "a conversation"}\n')
    writer = RecordWriter(folder / "records" / f"{gid}.jsonl")
    writer.header(game_id=gid, title=g.title, baselines=g.baselines, obs=g.obs, policy="test", seed=0)
    return Kernel(Session(g, writer, max_actions=max_actions), cfg), games, canary


@pytest.fixture
def attacked_kernel(open_place):
    k, games, canary = new_kernel(open_place, KernelConfig(call_timeout_s=3.0, memory_mb=1024))
    targets = Targets(open_place, games, open_place)
    k.start()
    yield k, targets, canary
    k.close()
    targets.close()


def _check(k: Kernel, attack, targets: Targets, canary: str) -> None:
    r = k.run(attack.render(**targets.where))
    text = r.text
    assert "ESCAPED" not in text, f"{attack.name}: {text[:1500]}"
    assert canary not in text, attack.name
    assert len(text) <= MESSAGE_LIMIT, f"{attack.name}: a tool message of {len(text)} characters"
    if attack.restarts:
        assert r.restarted, f"{attack.name}: {text[:800]}"
    if attack.survives:
        assert not r.restarted, f"{attack.name} was not refused: {text[:800]}"
    r.text.encode("utf-8")  # any string the worker sent is valid text now
    json.dumps([r.stdout, r.error, r.result, r.action_results]).encode("utf-8")
    assert targets.reached() == [], f"{attack.name} reached a service outside the sandbox"
    alive(k)


FAST = [a for a in ATTACKS if not a.slow]


@pytest.mark.parametrize("attack", FAST, ids=[a.name for a in FAST])
def test_attack_is_contained(attacked_kernel, attack):
    k, targets, canary = attacked_kernel
    _check(k, attack, targets, canary)
    if k.lease:  # nothing of the worker's uid but the worker itself
        assert process.pids_of_uid(k.lease.uid) == [k.proc.pid]


@pytest.mark.slow
def test_a_worker_that_stops_reading_cannot_hang_the_host(attacked_kernel):
    k, targets, canary = attacked_kernel
    _check(k, next(a for a in ATTACKS if a.name == "stop-reading-the-pipe"), targets, canary)


def _expected(report: dict[str, str], which: str | None = None) -> None:
    """What each posture must verify: everything on a full-privilege root; as root without
    CAP_SYS_ADMIN the namespaces and the disk quota's tmpfs in a user namespace of the worker's
    own where the machine allows one (issue 48), else everything but the mount namespace (network
    and IPC through seccomp, the disk quota the host's count), as always with Docker's profile."""
    if os.geteuid() != 0:
        pytest.skip("the uid, namespace and cgroup layers need root")
    off = {k for k, v in report.items() if not v.startswith("on")}
    which = which or posture.current()
    assert report["filesystem"].startswith("on: landlock"), report  # no_new_privs first (issue 30)
    if which == "full" or which == "kaggle" and "user namespace" in report["mounts"]:
        assert off <= {"cgroup"}, report  # a cgroup needs a writable hierarchy (CI's machine has one)
        assert report["mounts"].startswith("on: private") and report["disk_quota"].startswith("on: tmpfs")
    else:
        assert off <= {"mounts", "cgroup"} and "mounts" in off, report
        assert which == "kaggle" or "no user namespace" in report["mounts"], report
        assert report["network"] == "on: seccomp denies every socket"
        assert report["ipc"].startswith("on: seccomp denies SysV IPC")


def test_every_layer_is_reported_and_applied(attacked_kernel):
    """The header's report (a probe worker's verified layers) is what this kernel's worker
    verified, and what this posture must have."""
    k, _, _ = attacked_kernel
    report = isolation.report()
    _expected(report)
    assert k.layers == report
    rec = read_record(k.session.writer.path)
    assert rec.header["sandbox"] == report
    ev = next(e for e in rec.events if e["kind"] == "sandbox")
    assert ev["data"] == k.layers


def _probe(k: Kernel, code: str, timeout_s: float | None = None) -> str:
    """`code`'s output, the in-process guard switched off first (the layers are the OS's)."""
    r = k.run(UNGUARD + code, timeout_s=timeout_s)
    assert r.kind == "ok", r.text
    return r.stdout.strip()


def test_the_header_matches_a_probe_of_each_layer(attacked_kernel):
    """Each layer the record header reports on is seen to hold from inside (or, for the cgroup,
    from the host), and each it reports off is seen not to: the report is what was verified."""
    k, targets, _ = attacked_kernel
    report = read_record(k.session.writer.path).header["sandbox"]
    on = {name: v.startswith("on") for name, v in report.items()}
    w = targets.where
    seen = {
        "guard": "not allowed" in k.run(f"open({k.deny_read[0]!r} + '/x')").text,  # first: the probes unguard
        "uid": _probe(k, "import sys; print(sys.modules['os'].geteuid() != 0)") == "True",
        "seccomp": _probe(k, "import sys\ntry:\n    sys.modules['_socket'].socketpair()\n    print('allowed')\n"
                             "except OSError:\n    print('denied')") == "denied",
        "network": _probe(k, f"import sys\ns = sys.modules.get('_socket') or sys.modules['socket']\ntry:\n"
                             f"    c = s.socket(2, 1); c.settimeout(1); c.connect(('127.0.0.1', {w['port']}))\n"
                             "    print('connected')\nexcept OSError:\n    print('denied')") == "denied",
        "filesystem": _probe(k, f"import sys\ntry:\n    print('read' if sys.modules['os'].listdir({w['games']!r}) else "
                                "'denied')\nexcept OSError:\n    print('denied')") == "denied",
        "mounts": _probe(k, "import sys; print(sys.modules['os'].stat('/proc/self/ns/mnt').st_ino)")
        != str(os.stat("/proc/self/ns/mnt").st_ino),
        "ipc": _probe(k, "import sys\nct = sys.modules.get('ctypes') or __import__('ctypes')\n"
                         "print(ct.CDLL(None).shmget(0, 4096, 0o1600) < 0)") == "True",
        "disk_quota": True,  # the tmpfs (or the host's count) is probed by its own tests below
        "cgroup": "/duck-" in Path(f"/proc/{k.proc.pid}/cgroup").read_text(),
        "limits": _probe(k, "import sys\nr = sys.modules.get('resource') or __import__('resource')\n"
                            "print(r.getrlimit(r.RLIMIT_AS)[1] == 1024 << 20)") == "True",
        "process": _probe(k, "import sys\nos = sys.modules['os']\ntry:\n    os.setpgid(0, 0)\n    print('moved')\n"
                             "except OSError:\n    print(os.getsid(0) == os.getppid())") == "True",  # its worker's
    }
    if report["disk_quota"].startswith("on: tmpfs"):
        assert _probe(k, "import os; print(os.statvfs('.').f_files)") == str(k.cfg.disk_inodes)
    assert seen == on, report


def _hangs_not(fn, limit: float) -> None:
    """`fn()` returns within `limit` seconds (a thread, so that a hang fails the test)."""
    import threading

    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"{fn} hung the host for {limit} s"


@pytest.mark.parametrize("name", ["setpgid-then-sleep-at-exit", "setpgid-then-stop-self",
                                  "setpgid-then-swallow-the-timeout"])
def test_no_process_trick_hangs_the_host(open_place, name):
    """Issue 30's three hang variants: each call returns, close() returns, nothing is left of
    the worker's uid (or, without root, of the worker)."""
    k, games, canary = new_kernel(open_place, KernelConfig(call_timeout_s=2.0, grace_s=0.5, memory_mb=1024))
    targets = Targets(open_place, games, open_place)
    try:
        k.start()
        pid, uid = k.proc.pid, k.lease.uid if k.lease else None
        _hangs_not(lambda: _check(k, next(a for a in ATTACKS if a.name == name), targets, canary), 60)
        _hangs_not(k.close, 30)
        assert k.proc is None and not Path(f"/proc/{pid}").exists()  # killed and reaped
        if uid is not None:
            assert process.pids_of_uid(uid) == []
    finally:
        targets.close()


def test_restart_keeps_the_game_and_says_why(attacked_kernel):
    k, targets, _ = attacked_kernel
    k.run("keep = 1\nr = action('UP')")
    before = len(k.state.entries)
    attack = next(a for a in ATTACKS if a.name == "forged-done-with-bad-types")
    r = k.run(attack.render(**targets.where))
    assert r.kind == "crash" and r.restarted and "protocol violation" in r.text.splitlines()[0]
    r = k.run("print(len(history), 'keep' in globals())")
    assert r.stdout == f"{before} False\n"


def test_a_flood_of_tiny_output_messages_is_capped_in_total(attacked_kernel):
    """Issue 30: each forged one-character `out` message past the head added a cut-note, so one
    call wrote a 51 MB conversation line. The head is the whole call's."""
    k, targets, _ = attacked_kernel
    r = k.run(next(a for a in ATTACKS if a.name == "tiny-forged-out-messages").render(**targets.where))
    assert len(r.text) < 3 * OUTPUT_CHARS, len(r.text)
    assert r.stdout.count("chars cut") <= 1


def test_the_worker_is_in_a_session_of_its_own_with_its_plan_off_its_command_line(attacked_kernel):
    """Issue 30: the worker shared the host's session (TIOCSTI reached the user's shell) and its
    plan, naming the games and the records, was on its command line."""
    k, targets, _ = attacked_kernel
    assert os.getsid(k.proc.pid) == k.proc.pid != os.getsid(0)
    cmdline = Path(f"/proc/{k.proc.pid}/cmdline").read_bytes().decode()
    assert targets.where["games"] not in cmdline and "records" not in cmdline and "plan" not in cmdline


@pytest.mark.skipif(os.geteuid() != 0, reason="a cgroup of its own needs root")
def test_the_worker_has_a_memory_cgroup_that_goes_with_it(attacked_kernel):
    k, _, _ = attacked_kernel
    if not k.layers["cgroup"].startswith("on"):
        pytest.skip(k.layers["cgroup"])
    folder = Path(k.cgroup["dir"])
    assert k.cgroup["limit"] == int(Path(k.cgroup["limit_file"]).read_text())
    assert str(k.proc.pid) in (folder / "cgroup.procs").read_text().split()
    # 300 MB; its own time limit: on 2 loaded cores the kernel's 3 s did not always suffice
    assert _probe(k, "import numpy as np\nx = np.ones(300 << 17)\nprint(x.sum() > 0)", timeout_s=30) == "True"
    peak = folder / ("memory.max_usage_in_bytes" if "v1" in k.cgroup["version"] else "memory.peak")
    if peak.exists():
        assert int(peak.read_text()) > 290 << 20  # the worker's memory is charged here
    k.close()
    assert not folder.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the fallback of interest is root without Landlock or namespaces")
def test_fallback_without_landlock_and_namespaces(open_place):
    """Layers turned off (`kernel.layers_off`) as on a machine without them: seccomp still
    stands; the host counts the temp dir (bytes and inodes, a restart past either), what the
    uid writes to /tmp, /var/tmp and /dev/shm (removed with the worker) and ends a thread that
    outlives its call; where the Python installation is open to other users (Kaggle's, and
    here in the kaggle posture), the uid stands too and file modes keep a root-only games copy
    and the run's folders closed. Where it is not (pyenv under /root), the uid layer says so."""
    private = open_place / "private"
    private.mkdir(mode=0o700)  # what duck.sandbox.fallback's root-only copy and closed folders are
    cfg = KernelConfig(call_timeout_s=5.0, memory_mb=1024, disk_mb=40, disk_inodes=2000,
                       layers_off=["landlock", "namespaces"])
    k, games, canary = new_kernel(private, cfg, max_actions=50)
    targets = Targets(open_place, games, private)
    closed = [p for p in isolation.python_paths() if posture.closed_ancestor(p)]
    with k:
        k.start()
        assert k.layers["mounts"] == "off: turned off" and "off: turned off" in k.layers["filesystem"]
        assert k.layers["seccomp"].startswith("on") and k.layers["disk_quota"].startswith("on: checked by the host")
        for name in ("children-outlive-the-call", "tcp-to-local-port", "ctypes-kill-parent", "renice-parent",
                     "unix-sockets-to-services", "sysv-ipc-beyond-the-limit", "memfd-page-cache"):
            _check(k, next(a for a in ATTACKS if a.name == name), targets, canary)
        if closed:
            assert k.layers["uid"].startswith("off: the Python installation")
            assert k.layers["filesystem"].startswith("off: turned off; file modes do not hold")  # root reads all
            r = k.run("import sys\nsys.modules['_thread'].start_new_thread(sys.modules['time'].sleep, (1000,))")
            assert r.kind == "ok" and not Path(f"/proc/{k.last_call}").exists()  # it ended with its call's process
            assert process.threads(k.proc.pid) == 1
            return
        assert k.layers["uid"].startswith("on") and isolation.relies_on_file_modes(cfg.layers_off)
        assert k.layers["filesystem"].startswith("on: file modes")  # verified: a root-only probe file stays closed
        for name in ("walk-played-games", "append-forged-level-lines", "threads-outlive-the-call",
                     "edit-the-checkout", "read-run-records-and-conversations"):
            _check(k, next(a for a in ATTACKS if a.name == name), targets, canary)
        r = k.run("for i in range(20):\n    open(f'f{i}', 'wb').write(b'0' * (8 << 20))")
        assert r.restarted and "disk quota of 40 MB" in r.text
        r = k.run(next(a for a in ATTACKS if a.name == "folder-flood").render(**targets.where))
        assert r.restarted and "ESCAPED" not in r.text, r.text[:500]
        r = k.run(next(a for a in ATTACKS if a.name == "fill-shared-folders").render(**targets.where))
        assert r.restarted, r.text[:500]  # /dev/shm and /tmp count against the 40 MB
        from duck.sandbox.wall import quota
        assert quota.owned(k.lease.uid, skip=k.workdir) == []  # and were removed with the worker
        alive(k)


# Without CAP_SYS_PTRACE as well (Docker's default set), only what that capability changes and a
# representative set run again (CI has 2 cores, issue 37): the layer report against the probes, the
# host's count of the worker's disk use and files (it reads /proc/<worker>/fd), the attacks on
# /proc and ptrace, the process tricks, and one attack of each other class.
DOCKER = ("every_layer or header_matches or fallback or no_process_trick or restart_keeps or fill or folder-flood "
          "or fallocate or tmpfile or timers or proc-parent or ptrace or vm-readv or guard-call or tcp-to "
          "or walk-played or read-run or forged-done or sigkill or threads or test_disk_quota")


@pytest.mark.slow
@pytest.mark.parametrize("which", ["kaggle", "docker"])
def test_the_attacks_hold_in_the_other_postures(which):
    """This file again as root without CAP_SYS_ADMIN (Kaggle's container; tests/posture.py), and
    in part without CAP_SYS_PTRACE as well (with tests/test_disk_quota.py): the same attacks,
    the header checked against the probes of that posture."""
    if os.environ.get(posture.ENV):
        pytest.skip(f"already in the {os.environ[posture.ENV]} posture")
    why = posture.available()
    if why:
        pytest.skip(why)
    files = [str(Path(__file__))] + ([str(Path(__file__).parent / "test_disk_quota.py")] if which == "docker" else [])
    pick = "not other_postures" + (f" and ({DOCKER})" if which == "docker" else "")
    r = subprocess.run(posture.wrap([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files,
                                     "-k", pick], which), cwd=ROOT, capture_output=True, text=True, timeout=900)
    tail = (r.stdout + r.stderr)[-4000:]
    assert r.returncode == 0 and " passed" in tail, tail


def test_the_posture_is_the_one_named():
    """The nested runs above really lack CAP_SYS_ADMIN, and CAP_SYS_PTRACE (else they would
    prove nothing)."""
    assert posture.current() == (os.environ.get(posture.ENV) or posture.current())
    if os.environ.get(posture.ENV) in ("kaggle", "docker"):
        assert os.geteuid() == 0 and not posture.cap_sys_admin()
        assert posture.cap_sys_ptrace() == (os.environ[posture.ENV] == "kaggle")
