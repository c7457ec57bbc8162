"""The toolkit (`arc_agi`) imported without its on-screen rendering.

`arc_agi.rendering` imports `matplotlib.pyplot` when it is imported (0.3-0.7 s here, over
half of arc_agi's import and of `duck play`'s start-up) for its `render_mode="human"`
window, which duck never opens: duck draws frames itself (duck.game.frames). When
matplotlib is not loaded yet, `import_toolkit()` imports arc_agi with `matplotlib` marked
absent in `sys.modules`, so the toolkit's own `try: import matplotlib... except ImportError`
takes its no-matplotlib branch (`HAS_MATPLOTLIB = False`); the mark is removed at once, so a
later `import matplotlib.pyplot` (the report's plots) works as usual. With matplotlib
already loaded, arc_agi is imported as it is.
"""

from __future__ import annotations

import sys
from types import ModuleType


def import_toolkit() -> ModuleType:
    if "arc_agi" in sys.modules:
        return sys.modules["arc_agi"]
    marked = "matplotlib" not in sys.modules
    if marked:
        sys.modules["matplotlib"] = None  # type: ignore[assignment]  # "absent": import raises ImportError
    try:
        import arc_agi
    finally:
        if marked and sys.modules.get("matplotlib", 0) is None:
            del sys.modules["matplotlib"]
    return arc_agi
