"""Hand-written simulators of the bundled games (and of level 1 of two public games), as a model
would write them in its `python` calls with the world-model tools (duck.sandbox.tools). They are
test fixtures: code strings run inside a real kernel, never imported by the package."""
