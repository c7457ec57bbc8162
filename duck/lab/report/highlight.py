"""Python highlighted as HTML for the report's conversation view, with the standard library's
tokenizer (no dependency, no script): keywords, builtins, strings, numbers and comments get a
class (`k`, `b`, `s`, `n`, `c`) that the report's CSS colours. Code that does not tokenize
(a reply cut mid-string) is shown escaped, without colours."""

from __future__ import annotations

import builtins
import html
import io
import keyword
import tokenize

BUILTINS = frozenset(dir(builtins)) | {"action", "notes", "current_frame", "previous_frame", "history",
                                       "valid_actions", "result"}  # the kernel's names stand out too
SOFT = frozenset(getattr(keyword, "softkwlist", ()))


def _css_class(tok: tokenize.TokenInfo) -> str | None:
    if tok.type == tokenize.NAME:
        if keyword.iskeyword(tok.string) or tok.string in SOFT:
            return "k"
        return "b" if tok.string in BUILTINS else None
    if tok.type == tokenize.STRING or tok.type in _FSTRING:
        return "s"
    return {tokenize.NUMBER: "n", tokenize.COMMENT: "c"}.get(tok.type)


_FSTRING = {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
            if hasattr(tokenize, n)}


def highlight_python(code: str) -> str:
    """`code` as escaped HTML with <span class=...> around the tokens worth a colour."""
    lines = code.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(rc: tuple[int, int]) -> int:
        row, col = rc
        return offsets[min(row - 1, len(lines))] + col if row >= 1 else 0

    out: list[str] = []
    done = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            cls = _css_class(tok)
            if cls is None or tok.type == tokenize.ENDMARKER:
                continue
            a, b = pos(tok.start), pos(tok.end)
            if a < done:
                continue
            out.append(html.escape(code[done:a]))
            out.append(f"<span class={cls}>{html.escape(code[a:b])}</span>")
            done = b
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # what was coloured so far stays; the rest is plain
    out.append(html.escape(code[done:]))
    return "".join(out)
