"""The global time scheduler: decides only *when* games start and stop, never how they play.

* `policy`   pure policies by name (`fixed`: the Duck's equal split; `field`, `ucb`, `adaptive`:
             slot gates on generated tokens and actions, in `field`, `ucb`, `adaptive`), the
             state they see and the gate they share in `state`
* `book`     the slot rules (grant, release, stop, deadlines), once, for the runner and the
             simulator
* `runner`   executes a policy over real game workers: every game admitted, at most S holding
             a model-server slot, slots handed on at the games' yield points (a thread per
             game, one condition)
* `simulate` replays progress curves under a policy through the server model (`throughput`)
* `traces`   the Duck's recorded runs as token curves; `trajectories` and `synthetic` the two
             curve sets the simulator plays; `compare` the policy x slots x curves table
* `extend`   the hazard model that extends curves past their recorded end (seconds or tokens)
* `curves`   reading runs.jsonl and the human baselines (scores: duck.play.scoring)
* `clock`    the real clock and a virtual one for deterministic tests (each owns the condition)
* `cli`      `duck simulate ...` (registered into the duck CLI)

Its thresholds are the config's `scheduler` section (duck/config.py); synthetic runs and a
scripted worker for tests live in tests/scheduler_fakes.py.
"""
