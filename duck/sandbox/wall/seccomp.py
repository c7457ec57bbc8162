"""The worker's seccomp filters, built with libseccomp (through `pyseccomp`), never as hand-written BPF.

Default: allow (CPython and numpy make hundreds of different syscalls). Denied with EPERM (ioctl:
ENOTTY): what the worker never needs once started, by class in the lists below. Two parts, which
stack: `TEMPLATE` rules, loaded by the worker that never runs model code (it must still fork one
process per call: duck.sandbox.worker), and `CALL` rules, which that call's process adds before
it runs any (no new process, signals to itself only, prctl to a few reads). Where each rule
comes from (issues 30, 37, 48) and why: docs/sandbox.md, "The seccomp filter".

Integer arguments are compared on their low 32 bits (MASKED_EQ with 0xffffffff) wherever an
equality would allow: the kernel reads `int` arguments from the low half of the register. An
allow-list over one argument is two range rules (below the lowest, above the highest allowed
value: a 64-bit compare, so high bits set fall above) and an equality per value between.
Syscalls newer than the installed libseccomp are denied by number (the unified table, 424 on).
"""

from __future__ import annotations

import errno
import signal

CLONE_THREAD = 0x00010000
LOW32 = 0xFFFFFFFF

_DENY_ALWAYS = (
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open", "pidfd_send_signal",
    "pidfd_getfd", "tkill", "setpriority", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr",
    "ioprio_set", "process_madvise",
    # programs, mounts, namespaces, the kernel's own
    "fork", "vfork", "execve", "execveat", "mknod", "mknodat", "mount", "umount2", "pivot_root", "chroot",
    "unshare", "setns", "move_mount", "open_tree", "open_tree_attr", "fsopen", "fsmount", "fsconfig",
    "fspick",
    "mount_setattr", "listmount", "statmount", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key", "init_module", "finit_module",
    "delete_module", "reboot", "kexec_load", "kexec_file_load", "swapon", "swapoff", "acct", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "syslog", "vhangup", "iopl", "ioperm", "quotactl",
    "lookup_dcookie", "name_to_handle_at", "open_by_handle_at",
    # identities (dropped for good)
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups",
    # process control and code between calls
    "setpgid", "setsid", "timer_create", "setitimer", "alarm", "timerfd_create",
    # the disk past the quota, and what could watch or stall it
    "fallocate", "sync", "syncfs", "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init",
    "fanotify_mark",
    # sockets; memory no limit counts
    "socket", "socketpair", "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl",
    "semget", "semop", "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr", "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents",
    "io_pgetevents", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "setxattrat", "removexattrat", "memfd_create", "memfd_secret")

# Numbers of the syscalls above that an older libseccomp may not know (the unified table).
_NEW_SYSCALLS = {"open_tree_attr": 467, "setxattrat": 463, "removexattrat": 466, "memfd_secret": 447,
                 "listmount": 458, "statmount": 457}

STOP_SIGNALS = (signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY = 8, 10, 15, 1024, 1026
O_TMPFILE_BIT = 0o20000000  # __O_TMPFILE (O_TMPFILE is it with O_DIRECTORY): the same on x86_64 and arm64
DENIED_FCNTL = (F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY)
# The ioctl requests a worker makes (strace of a worker's calls, experiments/LOG.md 2026-12-04):
# isatty's TCGETS, get_terminal_size's TIOCGWINSZ, FIONREAD, FIONBIO, and FIOCLEX/FIONCLEX (CPython's
# set_inheritable: on ENOTTY it falls back to fcntl, on EPERM it raises). Everything else (space
# reservations, FS_IOC_*, terminal injection, async owners) is ENOTTY.
ALLOWED_IOCTL = (0x5401, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451)
# prctl options left to the call's process once it has set its parent-death signal and made
# itself dumpable: reads only, and naming a thread (the death signal, dumpability, the ptracer,
# the subreaper, seccomp modes and the rest are EPERM).
PR_GET_PDEATHSIG, PR_GET_DUMPABLE, PR_SET_NAME, PR_GET_NAME, PR_GET_SECCOMP = 2, 3, 15, 16, 21
PR_CAPBSET_READ, PR_GET_TIMERSLACK, PR_GET_NO_NEW_PRIVS = 23, 30, 39
ALLOWED_PRCTL = (PR_GET_PDEATHSIG, PR_GET_DUMPABLE, PR_SET_NAME, PR_GET_NAME, PR_GET_SECCOMP, PR_CAPBSET_READ,
                 PR_GET_TIMERSLACK, PR_GET_NO_NEW_PRIVS)
TEMPLATE, CALL, BOTH = "template", "call", "both"


def load(part: str, pid: int) -> int:
    """Build and load `part` of the filter (TEMPLATE, CALL or BOTH) for this process, whose pid is
    `pid`; returns the number of rules. Raises ImportError/OSError when libseccomp or its binding
    is missing (the caller reports it)."""
    import pyseccomp as sc  # here: only the worker loads libseccomp

    f = sc.SyscallFilter(defaction=sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    n = 0

    def deny(name: str, *args: object, action: int = eperm) -> None:
        nonlocal n
        number = sc.resolve_syscall(sc.Arch.NATIVE, name)
        if number < 0:
            number = _NEW_SYSCALLS.get(name, -1)
        if number < 0:
            return  # a syscall this architecture does not have
        try:
            f.add_rule(action, number, *args)
            n += 1
        except (OSError, ValueError, RuntimeError):
            pass  # not on this architecture

    def low(i: int, value: int) -> object:
        return sc.Arg(i, sc.MASKED_EQ, LOW32, value)

    def only(name: str, arg: int, allowed: tuple[int, ...], action: int) -> None:
        deny(name, sc.Arg(arg, sc.LT, min(allowed)), action=action)
        deny(name, sc.Arg(arg, sc.GT, max(allowed)), action=action)
        for value in range(min(allowed) + 1, max(allowed)):
            if value not in allowed:
                deny(name, low(arg, value), action=action)

    if part in (TEMPLATE, BOTH):
        for name in _DENY_ALWAYS:
            deny(name)
        for name, sig_arg in (("kill", 1), ("tgkill", 2), ("rt_sigqueueinfo", 1), ("rt_tgsigqueueinfo", 2)):
            for sig in STOP_SIGNALS:
                deny(name, low(sig_arg, int(sig)))
        deny("prlimit64", sc.Arg(0, sc.NE, 0))
        deny("clone3", action=sc.ERRNO(errno.ENOSYS))  # libc falls back to clone, whose flags a filter reads
        deny("open", sc.Arg(1, sc.MASKED_EQ, O_TMPFILE_BIT, O_TMPFILE_BIT))
        deny("openat", sc.Arg(2, sc.MASKED_EQ, O_TMPFILE_BIT, O_TMPFILE_BIT))
        deny("openat2", action=sc.ERRNO(errno.ENOSYS))  # its flags sit in a struct: libc falls back to openat
        for cmd in DENIED_FCNTL:
            deny("fcntl", low(1, cmd))
        only("ioctl", 1, ALLOWED_IOCTL, sc.ERRNO(errno.ENOTTY))
    if part in (CALL, BOTH):
        for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
            deny(name, sc.Arg(0, sc.NE, pid))
        deny("clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))  # a thread only (RLIMIT_NPROC refuses those)
        only("prctl", 0, ALLOWED_PRCTL, eperm)
    f.load()
    return n
