"""The sandbox's operating-system layers: what holds model code when the interpreter does not.

confine (the worker confining itself, in order), seccomp, landlock, cgroup, quota, isolation
(the plan, the uids, the report) and verify (the probes each layer passes before it is reported).
"""
