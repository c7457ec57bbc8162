"""The sandbox: model code runs in a process of its own per call, walled in by the operating system.

Host side: host (the Kernel: one worker per game, the call loop), lifecycle (the worker and each
call's process: start, end, restart, leftovers, the disk quota), process (starting and ending a
process), state (the game state the worker is told), actions and batch_guards (`action()` on the
host), trust and wire (what the host accepts), render (the tool message). Worker side: worker (the
game's variables, one process forked per call), call (that process), carry and restore (the
namespace from one call to the next), views (the game as model code sees it), probe, guard (clear
messages, not a wall). The OS layers are in wall/. The threat model, the layers and what each
posture verifies: docs/sandbox.md.
"""
