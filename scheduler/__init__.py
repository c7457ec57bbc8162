"""The global time scheduler: decides only *when* games start and stop, never how they play.

`policy` (pure policies by name; the state they see and the gate they share in `state`), `book`
(the slot rules, once, for the runner and the simulator), `runner` (a policy over real game
workers: every game admitted, at most S holding a model-server slot) and `clock`. Its
thresholds are the config's `scheduler` section; the simulator that chose them (`duck
simulate`) is part of the workbench. The slot model: docs/scheduler.md.
"""
