"""The building blocks of the report pages (duck report, the A/B page): the inline CSS,
escaping, a page, tables, number formats."""

from __future__ import annotations

import html
import math
from typing import Any, Iterable


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:1.2em auto;
max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-top:2px solid #ddd;padding-top:.6em;margin-top:1.6em}
h3{font-size:1em;margin:.9em 0 .3em}
table{border-collapse:collapse;font-size:.85em;margin:.4em 0}
th,td{border:1px solid #ddd;padding:.2em .5em;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.muted{color:#777;font-size:.85em}.bad{color:#b00}.good{color:#070}
.frames{display:flex;flex-wrap:wrap;gap:.8em}
.lvl{border:1px solid #ddd;padding:.3em;font-size:.8em}
.lvl img{width:192px;height:192px;image-rendering:pixelated;margin-right:.2em}
pre{background:#f7f7f7;padding:.5em;white-space:pre-wrap;font-size:.8em;max-height:24em;overflow:auto}
img.plot{max-width:100%}
"""


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def page(title: str, body: str, css: str = "") -> str:
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{CSS}{css}</style></head>\n<body>\n{body}\n</body></html>\n")


def table(head: list[str], rows: Iterable[list[Any]], left: int = 1) -> str:
    th = "".join(f"<th{' class=l' if i < left else ''}>{esc(h)}</th>" for i, h in enumerate(head))
    body = []
    for r in rows:
        tds = "".join(f"<td{' class=l' if i < left else ''}>{c if isinstance(c, Raw) else esc(c)}</td>"
                      for i, c in enumerate(r))
        body.append(f"<tr>{tds}</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class Raw(str):
    """Already-escaped HTML for a table cell."""


def md_table(head: list[str], rows: Iterable[list[Any]]) -> str:
    def cell(c: Any) -> str:
        return str(c).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def fmt(x: float | None, nd: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{nd}f}"


def fmt_int(x: float | None) -> str:
    return "–" if x is None else f"{int(round(x)):,}"


