"""The kernel: one persistent Python worker per game, and the host that owns its game.

Threat model
------------
The model's code is untrusted and may be deliberate: it can do anything CPython can do
inside the worker (reach the in-process guard through `gc`, `sys.modules` or `action`'s
globals, load ctypes, make any syscall, write anything on its pipe). What it must never do:
act on its game except through `action()`; read a game's source or solution (a model that
can read them makes every local score meaningless), or the run's records; change the records,
the checkout or the Python installation; signal, trace, renice, limit or read the memory of
the host or any other process; reach the network; leave a process or thread behind; fill
the disk or the memory; stop or hang the host, or make it record something false. The host
and the game (the toolkit, in the host's process) are trusted; so is the machine's kernel.

The layers (each verified by the worker right after it is applied, `duck.sandbox.wall.verify`, and
reported only when it holds: `isolation.report()`, a probe worker's, in every record header and
in `duck doctor`; the layers a kernel's worker verified in a `sandbox` event of the record), from
the outside in:

1. a uid of its own (`isolation.UidLease`, when the host is root, as on Kaggle and in CI):
   no home, no groups, no rights over the host's files or processes;
2. a seccomp filter built with libseccomp (`wall.seccomp`): no ptrace or process_vm_*,
   no signal, rlimit, priority or CPU placement aimed at another process, no pidfd_*, no
   socket at all, no setpgid, setsid, stop signal or timer, no SysV IPC, message queue, AIO,
   io_uring, xattr write or memfd (memory no limit counts), no fallocate or O_TMPFILE (disk
   no count sees), no F_SETOWN/F_SETSIG or
   TIOCSTI, no mknod, mount or namespaces, no new process after start-up;
3. process control (`process`): a session of its own (no terminal, no way into the host's
   process group), killed by pid, group and uid, every wait with a time-out;
4. no network: a network namespace where unshare works, the seccomp socket rule otherwise;
   an IPC namespace likewise;
5. the file system: Landlock (reads beneath the Python installation and the system
   libraries only, writes beneath its temp dir only), after no_new_privs, where the kernel
   has it; a private mount namespace hides the games, the records, /dev/shm, /dev/mqueue and
   /var/tmp under empty read-only tmpfs and mounts /proc with hidepid; with neither, the
   games are played from a root-only copy, the records and conversations folders are closed
   and the games' path is kept out of the command line (`fallback`), so file modes keep them
   from the worker's uid (verified with a root-only probe file); without a mount namespace
   the run's folders are closed in any case (Landlock does not mediate inotify or stat);
6. hard limits set before the drop of privileges (address space, file size, open files, no
   core, one process for its uid: no thread or child can even be created), a per-call CPU
   limit counting every thread, a memory cgroup of its own where the host can make one
   (`cgroup`), the temp dir capped by a tmpfs in size and inodes (or counted by the host,
   `quota`, by descriptors, with its folder depth, the deleted files it holds open or
   mapped and what its uid owns in /tmp, /var/tmp and /dev/shm, after each call and on a
   clock; what cannot be counted is over), its stderr a pipe, leftover threads and
   processes ended after each call;
7. a host that trusts nothing (`trust`, `wire`, `host`): every message checked against its
   op's shape and cut to size, a call's output and its whole tool message capped in total,
   any string made valid text, any nesting bounded, every write with a deadline; a worker
   that breaks the protocol, stops reading, outgrows its disk quota or leaves a thread is
   killed and restarted, and the model is told why;
8. the in-process guard (`guard`): clear messages for what a careless model tries (refused
   imports, writes outside the temp dir, reading the games), not a wall.

The postures it is tested in (tests/posture.py): root with every capability, and root
without CAP_SYS_ADMIN (Kaggle's container: no namespaces, no mounts).

Each class of attack is a snippet in tests/attacks.py, run against a kernel
(tests/test_sandbox_attacks.py) and through `duck play --policy llm`
(tests/test_attacks_play.py).

Modules: host (the Kernel: the call loop), state (the game state the worker is told),
lifecycle (the worker process: start, kill, restart, leftovers, quota), worker (the process
itself) and views (the game as model code sees it), confine (the worker confining itself),
verify (its probes), isolation (report, plan, uids), process (starting and ending a worker,
leftovers), cgroup, quota, fallback (the file-modes posture), landlock, seccomp (those in wall/), trust,
wire, guard, actions (action() on the host), batch_guards, render (the tool message the model
receives).
"""
