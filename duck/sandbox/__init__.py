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

The layers (each detected at start-up and reported: `isolation.report()` in every record
header and in `duck doctor`; the layers a worker really applied in a `sandbox` event of the
record), from the outside in:

1. a uid of its own (`isolation.UidLease`, when the host is root, as on Kaggle and in CI):
   no home, no groups, no rights over the host's files or processes, and /proc of the host
   closed to it (`confine._drop`);
2. a seccomp filter built with libseccomp (`seccomp_filter`): no ptrace or process_vm_*,
   no signal, rlimit, priority or CPU placement aimed at another process, no pidfd_*, no
   socket but AF_UNIX, no mknod, mount or namespaces, no new process after start-up;
3. no network: a network namespace where unshare works, the seccomp socket rule (and
   Landlock's TCP rule) otherwise;
4. the file system: Landlock (reads beneath the Python installation and the system
   libraries only, writes beneath its temp dir only) where the kernel has it; a private
   mount namespace hides the games and the records folders under empty read-only tmpfs;
   with neither, the games are played from a root-only copy and the records folder is
   closed (duck.run), so file modes keep them from the worker's uid;
5. hard limits set before the drop of privileges (address space, file size, open files, no
   core, one process for its uid: no thread or child can even be created), a per-call CPU
   limit counting every thread, the temp dir's size capped by a tmpfs (or checked by the
   host while a call runs and after it), leftover threads and processes ended after each call;
6. a host that trusts nothing (`trust`, `wire`, `host`): every message checked against its
   op's shape and cut to size, any string made valid text, any nesting bounded, every write
   with a deadline; a worker that breaks the protocol, stops reading, outgrows its disk
   quota or leaves a thread is killed and restarted, and the model is told why;
7. the in-process guard (`guard`): clear messages for what a careless model tries (refused
   imports, writes outside the temp dir, reading the games), not a wall.

Each class of attack is a snippet in tests/attacks.py, run against a kernel
(tests/test_sandbox_attacks.py) and through `duck play --policy llm`
(tests/test_attacks_play.py).

Modules: host (the Kernel), worker (the process), confine (the worker confining itself),
isolation (report, plan, uids, leftovers), landlock, seccomp_filter, trust, wire, guard,
actions (action() on the host), dialect and render (what the model receives).
"""
