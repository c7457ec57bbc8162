"""The global time scheduler: decides only *when* games start and stop, never how they play.

* `policy`   pure policies (`fixed`: the Duck's equal split; `adaptive`: progress-aware)
* `simulate` replays the Duck's recorded progress curves under a policy (virtual time)
* `extend`   the hazard model that extends curves past their recorded 45 minutes
* `curves`   reading runs.jsonl, and the official per-level / per-game score
* `runner`   executes a policy over real game workers (asyncio + one thread per slot)
* `clock`    the real clock and a virtual one for deterministic tests
* `cli`      `duck simulate ...` (registered into the duck CLI)

Its thresholds are the config's `scheduler` section (duck/config.py); synthetic runs and a
scripted worker for tests live in duck/testing/scheduler_fakes.py.
"""
