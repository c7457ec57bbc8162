"""The worker's seccomp filter, built with libseccomp (through the `pyseccomp` binding), never
as hand-written BPF.

Default: allow (CPython and numpy make hundreds of different syscalls; an allow-list would
break on the next glibc). Denied with EPERM, what the worker never needs once started:

* looking into or steering other processes: ptrace, process_vm_readv/writev, kcmp,
  pidfd_open/pidfd_send_signal/pidfd_getfd, signals to any pid but its own (kill, tgkill,
  tkill, rt_sigqueueinfo, rt_tgsigqueueinfo), rlimits of another pid (prlimit64 with a pid),
  priorities and CPU placement (setpriority, sched_setaffinity, sched_setscheduler,
  sched_setparam, sched_setattr, ioprio_set);
* new processes: fork, vfork, execve, execveat, clone without CLONE_THREAD (clone3 answers
  ENOSYS so that libc falls back to clone, whose flags a filter can read);
* network: socket() of any family but AF_UNIX;
* the file system's structure and the kernel: mknod(at), mount and its family, umount2,
  pivot_root, chroot, unshare, setns, bpf, perf_event_open, userfaultfd, io_uring_* (its
  operations would bypass this filter), keyctl and key syscalls, module loading, reboot,
  kexec, swapon/off, acct, clock/time setting, changing uid/gid (the worker has dropped
  them for good);
* the filter itself stays: loading one needs no_new_privs, which libseccomp sets.
"""

from __future__ import annotations

import errno
import os
import socket

CLONE_THREAD = 0x00010000

_DENY_ALWAYS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open", "pidfd_send_signal",
    "pidfd_getfd", "tkill", "setpriority", "sched_setaffinity", "sched_setscheduler", "sched_setparam",
    "sched_setattr", "ioprio_set", "fork", "vfork", "execve", "execveat", "mknod", "mknodat", "mount",
    "umount2", "pivot_root", "chroot", "unshare", "setns", "move_mount", "open_tree", "fsopen", "fsmount",
    "fsconfig", "fspick", "mount_setattr", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key", "init_module",
    "finit_module", "delete_module", "reboot", "kexec_load", "kexec_file_load", "swapon", "swapoff",
    "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "setuid", "setgid",
    "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups",
    "process_madvise", "quotactl", "lookup_dcookie", "name_to_handle_at", "open_by_handle_at")

DENIED = _DENY_ALWAYS + ("kill/tgkill/rt_sigqueueinfo/rt_tgsigqueueinfo to another pid",
                         "prlimit64 on another pid", "clone without CLONE_THREAD", "clone3",
                         "socket other than AF_UNIX")


def load() -> int:
    """Build and load the filter for this process; returns the number of rules. Raises
    ImportError/OSError when libseccomp or its binding is missing (the caller reports it)."""
    import pyseccomp as sc  # here: only the worker loads libseccomp

    pid = os.getpid()
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    n = 0

    def deny(name: str, *args: object, action: int = eperm) -> None:
        nonlocal n
        try:
            f.add_rule(action, name, *args)
            n += 1
        except (OSError, ValueError, RuntimeError):
            pass  # a syscall this architecture or libseccomp does not know

    for name in _DENY_ALWAYS:
        deny(name)
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        deny(name, sc.Arg(0, sc.NE, pid))
    deny("prlimit64", sc.Arg(0, sc.NE, 0))
    deny("clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    deny("clone3", action=sc.ERRNO(errno.ENOSYS))
    deny("socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
    f.load()
    return n

