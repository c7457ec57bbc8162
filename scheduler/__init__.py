"""The global time scheduler: decides only *when* games start and stop, never how they play.

* `policy`   pure policies by name (`fixed`: the Duck's equal split; `field`, `ucb`, `adaptive`:
             slot gates on generated tokens and actions, in `field`, `ucb`, `adaptive`), the
             state they see and the gate they share in `state`
* `book`     the slot rules (grant, release, stop, deadlines), once, for the runner and the
             simulator
* `runner`   executes a policy over real game workers: every game admitted, at most S holding
             a model-server slot, slots handed on at the games' yield points (a thread per
             game, one condition)
* `clock`    the real clock (it owns the condition; the tests' virtual one keeps its contract)

Its thresholds are the config's `scheduler` section (duck/config/). The simulator that
chose them (`duck simulate`) is part of the workbench; synthetic runs and a scripted worker
for tests live in tests/scheduler_fakes.py.
"""
