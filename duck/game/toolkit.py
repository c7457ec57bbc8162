"""The toolkit (`arc_agi`) imported without its on-screen rendering.

`arc_agi.rendering` imports `matplotlib.pyplot` (0.3-0.7 s here, over half of `duck play`'s
start-up) for a window duck never opens. When matplotlib is not loaded yet, `import_toolkit()`
imports arc_agi with `matplotlib` marked absent in `sys.modules`, so the toolkit takes its
no-matplotlib branch; the mark is removed at once, so a later `import matplotlib.pyplot` (the
report's plots) works as usual.
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
