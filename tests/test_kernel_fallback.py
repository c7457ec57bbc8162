"""The pieces of issue 30's fallback and process control, each on its own, against the real
machine: the command line scrubbed in place, the root-only games copy and closed run folders,
the host's disk count (inodes, unlinked open files, what a uid owns in /tmp and /dev/shm),
the worker's memory cgroup, the seccomp filter's rules as the kernel applies them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUNDLED, ROOT
from duck.sandbox import fallback
from duck.sandbox.wall import cgroup, isolation, quota


def test_the_games_path_leaves_the_command_line_and_argv_stays():
    """/proc/<pid>/cmdline is readable by every process; the path is overwritten in place,
    Python's sys.argv is untouched, and a forked child inherits the scrubbed line."""
    secret = "/some/where/environment_files"
    code = ("import os, sys, json\nfrom duck.sandbox.fallback import hide_from_cmdline\n"
            "n = hide_from_cmdline([sys.argv[1]])\npid = os.fork()\n"
            "if pid == 0:\n    os._exit(0 if sys.argv[1].encode() not in open('/proc/self/cmdline', 'rb').read() "
            "else 3)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "print(json.dumps([n, open('/proc/self/cmdline', 'rb').read().decode(), sys.argv[1], status]))")
    r = subprocess.run([sys.executable, "-c", code, secret, "--games", secret], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    n, line, argv1, child = json.loads(r.stdout)
    assert n == 2 and secret not in line and "--games" in line and "*" * len(secret) in line
    assert argv1 == secret and child == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="root-only copies need root")
def test_the_fallback_plays_a_root_only_copy_and_closes_the_run_folders(tmp_path, caplog):
    games = tmp_path / "open" / "games"
    games.parent.mkdir()
    games.parent.chmod(0o755)
    tmp_path.chmod(0o755)
    import shutil

    shutil.copytree(BUNDLED, games)
    records = tmp_path / "run" / "records"
    with fallback.games_for_play(games, records, ["landlock", "namespaces"]) as played:
        if played == games:
            pytest.skip("the worker has no uid of its own here: file modes are no wall")
        assert (played / "zs01").is_dir() and fallback.closed_ancestor(str(played))
        assert stat.S_IMODE(played.parent.stat().st_mode) == 0o700
        for folder in (records, records.parent / "conversations"):
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not played.exists()  # the copy goes with the run
    if fallback.open_to_others(games):
        assert "open to other users" in caplog.text


def test_the_quota_counts_inodes_unlinked_files_and_what_the_uid_owns(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for i in range(50):
        (work / f"d{i}").mkdir()
    used = quota.tree(str(work), quota.Usage(1 << 40, 1 << 40))
    assert used.inodes == 51
    assert quota.tree(str(work), quota.Usage(1 << 40, 10)).inodes == 11  # the walk stops past the cap
    f = open(work / "held", "wb")
    f.write(b"0" * (1 << 20))
    f.flush()
    os.unlink(work / "held")
    try:
        held = quota.unlinked_open_files(os.getpid())
        assert held.inodes >= 1 and held.bytes >= 1 << 20
    finally:
        f.close()
    if os.geteuid() != 0:
        return
    uid = isolation.UidLease.take()
    try:  # (a host killed earlier, in this suite too, may have left its temp dir under this uid)
        left = len(quota.owned(uid.uid))
        shm = Path("/dev/shm") / f"duck-quota-test-{os.getpid()}"
        shm.write_bytes(b"0" * (2 << 20))
        os.chown(shm, uid.uid, uid.uid)
        assert str(shm) in quota.owned(uid.uid)
        assert quota.usage(str(work), uid.uid, None, quota.Usage(1 << 40, 1 << 40)).bytes >= 2 << 20
        assert quota.remove_owned(uid.uid) == left + 1 and not shm.exists() and quota.owned(uid.uid) == []
    finally:
        uid.release()


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")
def test_a_cgroup_is_made_with_its_limit_and_removed():
    entry, why = cgroup.make(300 << 20)
    if entry is None:
        pytest.skip(why)
    try:
        assert int(Path(entry["limit_file"]).read_text()) == entry["limit"] >= 299 << 20
        assert Path(entry["dir"]).name.startswith(f"duck-{os.getpid()}-")
    finally:
        cgroup.remove(entry)
    assert not Path(entry["dir"]).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")
def test_a_dead_hosts_cgroup_is_swept(tmp_path):
    entry, why = cgroup.make(64 << 20)
    if entry is None:
        pytest.skip(why)
    cgroup.remove(entry)
    stale = Path(entry["dir"]).parent / "duck-999999999-0"  # no such pid
    stale.mkdir()
    try:
        entry, _ = cgroup.make(64 << 20)
        cgroup.remove(entry)
        assert not stale.exists()
    finally:
        if stale.exists():
            stale.rmdir()


SECCOMP_PROBE = r"""
import ctypes, errno, fcntl, os, signal, socket, sys
from duck.sandbox.wall import confine, seccomp
confine._import_pyseccomp()
seccomp.load(seccomp.BOTH, os.getpid())
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
def tried(name, fn):
    try:
        fn()
        out[name] = "allowed"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
def raw(nr, *args):
    if libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args]) < 0:
        raise OSError(ctypes.get_errno(), "raw")
r, w = os.pipe()
tried("socket_unix", lambda: socket.socket(socket.AF_UNIX))
tried("socketpair", socket.socketpair)
tried("setpgid", lambda: os.setpgid(0, 0))
tried("setsid", os.setsid)
tried("sigstop_self", lambda: os.kill(os.getpid(), signal.SIGSTOP))
tried("sigstop_high_bits", lambda: raw(62, os.getpid(), signal.SIGSTOP | 1 << 32))
tried("sigusr2_self", lambda: (signal.signal(signal.SIGUSR2, lambda *a: None), os.kill(os.getpid(), signal.SIGUSR2)))
tried("f_setown", lambda: fcntl.fcntl(r, fcntl.F_SETOWN, os.getpid()))
tried("f_setown_high_bits", lambda: raw(72, r, 8 | 1 << 32, os.getpid()))
tried("f_getfl", lambda: fcntl.fcntl(r, fcntl.F_GETFL))
tried("tiocsti", lambda: fcntl.ioctl(r, 0x5412, b"x"))
tried("memfd", lambda: os.memfd_create("x"))
tried("setxattr", lambda: os.setxattr(sys.argv[1], "user.x", b"1"))
tried("shmget", lambda: raw(29, 0, 4096, 0o1600))
tried("io_setup", lambda: raw(206, 8, ctypes.addressof(ctypes.c_ulong(0))))
tried("timer_create", lambda: raw(222, 1, 0, ctypes.addressof(ctypes.c_int(0))))
tried("sync", lambda: raw(162))
tried("syncfs", lambda: raw(306, r))
tried("inotify_init1", lambda: raw(294, 0))
fd = os.open(sys.argv[1], os.O_RDWR)
tried("resvsp64", lambda: fcntl.ioctl(fd, 0x4030582a, bytes(48)))  # FS_IOC_RESVSP64: fallocate by another name
tried("zero_range", lambda: fcntl.ioctl(fd, 0x40305839, bytes(48)))
tried("resvsp_high_bits", lambda: raw(16, fd, 0x4030582a | 1 << 32, ctypes.addressof(ctypes.create_string_buffer(48))))
tried("tcgets_high_bits_tiocsti", lambda: raw(16, r, 0x5412 | 1 << 32, ctypes.addressof(ctypes.c_char(b"x"))))
tried("fionread", lambda: fcntl.ioctl(r, 0x541B, b"\0" * 4))
tried("set_inheritable", lambda: os.set_inheritable(r, True))
tried("pr_set_pdeathsig", lambda: raw(157, 1, 0))
tried("pr_set_dumpable", lambda: raw(157, 4, 0))
tried("pr_set_ptracer", lambda: raw(157, 0x59616d61, 0))
tried("pr_get_pdeathsig", lambda: raw(157, 2, ctypes.addressof(ctypes.c_int(0))))
print(__import__("json").dumps(out))
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe uses x86-64 syscall numbers")
def test_the_seccomp_filter_denies_what_issues_30_and_48_used_and_nothing_the_worker_needs(tmp_path):
    """The filter alone, in a throwaway process: every syscall of the findings fails with EPERM
    (high bits set or not), and what the worker does itself still works."""
    target = tmp_path / "x"
    target.write_text("x")
    r = subprocess.run([sys.executable, "-c", SECCOMP_PROBE, str(target)], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    allowed = {"f_getfl", "sigusr2_self", "fionread", "set_inheritable", "pr_get_pdeathsig"}
    assert {k for k, v in got.items() if v == "allowed"} == allowed, got
    ioctls = {"tiocsti", "resvsp64", "zero_range", "resvsp_high_bits", "tcgets_high_bits_tiocsti"}
    assert all(v == "ENOTTY" for k, v in got.items() if k in ioctls), got
    assert all(v == "EPERM" for k, v in got.items() if k not in allowed | ioctls), got


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid of its own for the worker needs root")
def test_the_run_folders_are_closed_wherever_no_mount_namespace_hides_them(tmp_path):
    """Issue 37: with Landlock but no mount namespace (Kaggle-like) the records were watchable
    (inotify, stat); they were closed only in the no-Landlock fallback."""
    records = tmp_path / "run" / "records"
    games = tmp_path / "games"
    games.mkdir()
    with fallback.games_for_play(games, records, ["namespaces"]) as played:
        if not isolation.without_mount_namespace(["namespaces"]):
            pytest.skip("the worker has no uid of its own here")
        for folder in (records.parent, records, records.parent / "conversations"):
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
        assert played == games or not isolation.report()["filesystem"].startswith("on: landlock")
