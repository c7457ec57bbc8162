"""The worker's seccomp filter, built with libseccomp (through the `pyseccomp` binding), never
as hand-written BPF.

Default: allow (CPython and numpy make hundreds of different syscalls; an allow-list would
break on the next glibc). Denied with EPERM, what the worker never needs once started:

* looking into or steering other processes: ptrace, process_vm_readv/writev, kcmp,
  pidfd_open/pidfd_send_signal/pidfd_getfd, signals to any pid but its own (kill, tgkill,
  tkill, rt_sigqueueinfo, rt_tgsigqueueinfo), rlimits of another pid (prlimit64 with a pid),
  priorities and CPU placement (setpriority, sched_setaffinity, sched_setscheduler,
  sched_setparam, sched_setattr, ioprio_set);
* escaping the host's process control (issue 30: a worker that joined the host's process
  group hid from the host's killpg and hung the run): setpgid, setsid, the stop signals
  (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU) even to itself, timer_create (a timer can deliver any
  signal), fcntl F_SETOWN/F_SETOWN_EX/F_SETSIG/F_SETLEASE/F_NOTIFY and ioctl FIOSETOWN/
  SIOCSPGRP/FIOASYNC (an O_ASYNC pipe signals its owner: SIGKILL to the host), ioctl TIOCSTI/
  TIOCLINUX (typing into a terminal), TIOCSCTTY/TIOCSPGRP/TIOCCONS/TIOCSETD;
* running between calls or filling the disk unseen (issue 37): setitimer, alarm and
  timerfd_create (a timer's signal handler ran model code in every gap between calls), fallocate
  (FALLOC_FL_KEEP_SIZE reserved 2 GB past RLIMIT_FSIZE in 7 ms), open/openat with O_TMPFILE (a
  file with no name no walk can count) and openat2 (whose flags sit in a struct a filter cannot
  read: ENOSYS, so that a libc falls back to openat);
* new processes: fork, vfork, execve, execveat, clone without CLONE_THREAD (clone3 answers
  ENOSYS so that libc falls back to clone, whose flags a filter can read);
* every socket (it talks to the host over inherited pipes): socket and socketpair of any
  family (named and abstract AF_UNIX sockets reached services outside);
* memory no limit counts (issue 30: SysV segments outlived the kernel, tmpfs extended
  attributes and memfd page cache took gigabytes beyond the quota, io_setup took the
  machine's whole fs.aio-max-nr): SysV IPC (shm*, msg*, sem*), POSIX message queues
  (mq_*), AIO (io_setup and its family) and io_uring_* (whose operations would bypass this
  filter too), xattr writes (setxattr and removexattr families, setxattrat/removexattrat),
  memfd_create, memfd_secret;
* the file system's structure and the kernel: mknod(at), mount and the whole mount API,
  umount2, pivot_root, chroot, unshare, setns, bpf, perf_event_open, userfaultfd, fanotify,
  keyctl and key syscalls, module loading, reboot, kexec, swapon/off, acct, clock/time
  setting, syslog, vhangup, iopl/ioperm, changing uid/gid (the worker has dropped them for
  good);
* the filter itself stays: loading one needs no_new_privs (set by duck.sandbox.wall.confine
  before Landlock, and by libseccomp again).

Integer arguments are compared on their low 32 bits (MASKED_EQ with 0xffffffff) wherever an
equality would allow: the kernel reads `int` and `unsigned int` arguments from the low half
of the register, so `SIGSTOP | 1 << 32` must not slip past a plain EQ. Syscalls newer than the
installed libseccomp (it resolves their names to -1) are denied by number: from 424 on every
architecture shares one table.
"""

from __future__ import annotations

import errno
import os
import signal

CLONE_THREAD = 0x00010000
LOW32 = 0xFFFFFFFF

_DENY_ALWAYS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open", "pidfd_send_signal",
    "pidfd_getfd", "tkill", "setpriority", "sched_setaffinity", "sched_setscheduler", "sched_setparam",
    "sched_setattr", "ioprio_set", "fork", "vfork", "execve", "execveat", "mknod", "mknodat", "mount",
    "umount2", "pivot_root", "chroot", "unshare", "setns", "move_mount", "open_tree", "open_tree_attr",
    "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key", "init_module",
    "finit_module", "delete_module", "reboot", "kexec_load", "kexec_file_load", "swapon", "swapoff",
    "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "setuid", "setgid",
    "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups",
    "process_madvise", "quotactl", "lookup_dcookie", "name_to_handle_at", "open_by_handle_at",
    # process control
    "setpgid", "setsid", "timer_create", "setitimer", "alarm", "timerfd_create",
    # the disk beyond the quota
    "fallocate",
    # sockets
    "socket", "socketpair",
    # memory beyond the limits
    "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
    "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
    "mq_getsetattr", "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "setxattrat",
    "removexattrat", "memfd_create", "memfd_secret",
    # the kernel's own
    "fanotify_init", "fanotify_mark", "syslog", "vhangup", "iopl", "ioperm")

# Numbers of the syscalls above that an older libseccomp may not know (the unified table).
_NEW_SYSCALLS = {"open_tree_attr": 467, "setxattrat": 463, "removexattrat": 466, "memfd_secret": 447}

STOP_SIGNALS = (signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY = 8, 10, 15, 1024, 1026
TIOCSCTTY, TIOCSPGRP, TIOCSTI, TIOCLINUX, TIOCCONS, TIOCSETD = 0x540E, 0x5410, 0x5412, 0x541C, 0x541D, 0x5423
FIOASYNC, FIOSETOWN, SIOCSPGRP = 0x5452, 0x8901, 0x8902
O_TMPFILE_BIT = 0o20000000  # __O_TMPFILE (O_TMPFILE is it with O_DIRECTORY): the same on x86_64 and arm64
DENIED_FCNTL = (F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY)
DENIED_IOCTL = (TIOCSCTTY, TIOCSPGRP, TIOCSTI, TIOCLINUX, TIOCCONS, TIOCSETD, FIOASYNC, FIOSETOWN, SIOCSPGRP)


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

    for name in _DENY_ALWAYS:
        deny(name)
    for name, sig_arg in (("kill", 1), ("tgkill", 2), ("rt_sigqueueinfo", 1), ("rt_tgsigqueueinfo", 2)):
        deny(name, sc.Arg(0, sc.NE, pid))
        for sig in STOP_SIGNALS:
            deny(name, low(sig_arg, int(sig)))
    deny("prlimit64", sc.Arg(0, sc.NE, 0))
    deny("clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    deny("clone3", action=sc.ERRNO(errno.ENOSYS))
    deny("open", sc.Arg(1, sc.MASKED_EQ, O_TMPFILE_BIT, O_TMPFILE_BIT))
    deny("openat", sc.Arg(2, sc.MASKED_EQ, O_TMPFILE_BIT, O_TMPFILE_BIT))
    deny("openat2", action=sc.ERRNO(errno.ENOSYS))
    for cmd in DENIED_FCNTL:
        deny("fcntl", low(1, cmd))
    for cmd in DENIED_IOCTL:
        deny("ioctl", low(1, cmd))
    f.load()
    return n
