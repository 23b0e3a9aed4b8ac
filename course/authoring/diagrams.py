"""The book's diagrams, written as SVG into book/src/diagrams/.

    python -m course.authoring.diagrams            # rewrite the SVG files
    python -m course.authoring.diagrams --check    # exit 1 when a file differs from what this writes

Chapters include the files inline (``{{#include diagrams/causal_mask.svg}}``), so their
text and lines take the page's own colour (``currentColor``) and stay legible in every
mdBook theme; the fills are translucent for the same reason. An inline SVG must have no
blank line (Markdown would end the HTML block there). tests/test_book.py checks that the
files are what this module writes and that each is shown on a page.
"""

from __future__ import annotations

import sys
from pathlib import Path

from course.outline import ROOT

DIAGRAMS = ROOT / "book" / "src" / "diagrams"

FONT = 'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"'
OPEN = "rgba(46, 160, 67, 0.30)"  # a key the query may see
MASKED = "rgba(218, 54, 51, 0.30)"  # a key the mask hides
CACHED = "rgba(56, 132, 255, 0.28)"  # a key that comes from the cache
NEW = "rgba(240, 160, 40, 0.35)"


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
            f'role="img" aria-label="{title}" style="max-width: 100%; height: auto; color: inherit" {FONT} '
            f'font-size="14" fill="currentColor" stroke="none">')
    return "\n".join([head, f"<title>{title}</title>", *body, "</svg>"]) + "\n"


def _text(x: float, y: float, text: str, *, size: int, anchor: str = "middle", weight: str = "") -> str:
    bold = f' font-weight="{weight}"' if weight else ""
    return f'<text x="{x:g}" y="{y:g}" text-anchor="{anchor}" font-size="{size}"{bold}>{text}</text>'


def _rect(x: float, y: float, w: float, h: float, fill: str, rx: int = 0, stroke: bool = True) -> str:
    line = ' stroke="currentColor" stroke-opacity="0.6"' if stroke else ""
    return f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" rx="{rx}" fill="{fill}"{line}/>'


def _arrow(x1: float, y1: float, x2: float, y2: float) -> str:
    return (f'<line x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}" stroke="currentColor" stroke-width="1.5" '
            'marker-end="url(#arrow)"/>')


ARROW_DEF = ('<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="currentColor"/></marker></defs>')


def causal_mask(seq_len: int = 4, past_len: int = 3) -> str:
    """The additive mask for seq_len new queries after past_len cached keys."""
    cell, left, top = 50, 150, 84
    total = past_len + seq_len
    body = []
    # Brackets over the key columns: cached, then new.
    for start, count, label, fill in [(0, past_len, f"cached: past_len = {past_len}", CACHED),
                                      (past_len, seq_len, f"new: seq_len = {seq_len}", NEW)]:
        x = left + start * cell
        body.append(_rect(x + 2, 22, count * cell - 4, 24, fill, rx=4, stroke=False))
        body.append(_text(x + count * cell / 2, 39, label, size=13))
    for j in range(total):
        body.append(_text(left + j * cell + cell / 2, top - 12, f"key {j}", size=12))
    for i in range(seq_len):
        y = top + i * cell
        body.append(_text(left - 10, y + cell / 2 + 5, f"query {past_len + i} (row {i})", anchor="end", size=12))
        for j in range(total):
            seen = j <= past_len + i
            body.append(_rect(left + j * cell, y, cell, cell, OPEN if seen else MASKED))
            body.append(_text(left + j * cell + cell / 2, y + cell / 2 + 5, "0" if seen else "−∞", size=15))
    bottom = top + seq_len * cell
    notes = ["mask[i, j] = 0 where j ≤ past_len + i: key j is in row i's past (or is row i itself)",
             "mask[i, j] = −∞ where key j is in row i's future",
             f"shape [seq_len, past_len + seq_len] = [{seq_len}, {total}]; row i is the token at position past_len + i"]
    for k, note in enumerate(notes):
        body.append(_text(20, bottom + 28 + 20 * k, note, anchor="start", size=13))
    return _svg(max(left + total * cell + 20, 640), bottom + 28 + 20 * len(notes), "The causal mask with a past_len offset", body)


def kv_cache(prompt: int = 4, steps: int = 3) -> str:
    """Keys (and values) in the cache, and the mask row of each decode step."""
    cell, left, top, gap = 34, 190, 50, 22
    body = [ARROW_DEF, _text(left, 24, "K and V in the cache, one column per token (each [B, H, ·, D])",
                              anchor="start", size=13)]
    rows = [("prefill: the prompt", prompt, 0)] + [(f"decode step {s}", 1, prompt + s - 1) for s in range(1, steps + 1)]
    for r, (label, new, past) in enumerate(rows):
        y = top + r * (cell + gap)
        body.append(_text(left - 12, y + 15, label, anchor="end", size=13))
        body.append(_text(left - 12, y + 31, f"past_len {past}, seq_len {new}", anchor="end", size=11))
        for j in range(past + new):
            fill = CACHED if j < past else NEW
            body.append(_rect(left + j * cell, y, cell, cell, fill))
            body.append(_text(left + j * cell + cell / 2, y + cell / 2 + 5, str(j), size=13))
        x_end = left + (past + new) * cell
        body.append(_text(x_end + 10, y + cell / 2 + 5, f"cache holds {past + new} tokens; the mask is "
                          f"[{new}, {past + new}]", anchor="start", size=12))
        if r + 1 < len(rows):
            body.append(_arrow(left - 40, y + cell + 2, left - 40, y + cell + gap - 2))
    y = top + len(rows) * (cell + gap)
    body.append(_rect(left, y - 6, 16, 16, CACHED))
    body.append(_text(left + 24, y + 7, "read from the cache (computed at an earlier step)", anchor="start", size=12))
    body.append(_rect(left + 350, y - 6, 16, 16, NEW))
    body.append(_text(left + 374, y + 7, "computed now, then appended", anchor="start", size=12))
    return _svg(left + (prompt + steps) * cell + 350, y + 22, "A KV cache growing over decode steps", body)


def heads() -> str:
    """Splitting C = H·D into heads and merging them back, with GPT-2 small's shapes."""
    body = [ARROW_DEF]
    left, width, h = 30, 576, 30
    # One token's vector, split into 12 slices of 64.
    body.append(_text(left, 22, "one token's q (or k, v): C = 768 numbers", anchor="start", size=13))
    for k in range(12):
        fill = f"rgba({(56 + 37 * k) % 255}, {(132 + 71 * k) % 255}, {(200 + 53 * k) % 255}, 0.35)"
        body.append(_rect(left + k * width / 12, 32, width / 12, h, fill))
        body.append(_text(left + k * width / 12 + width / 24, 52, f"h{k}", size=12))
    body.append(_text(left + width / 2, 82, "head h owns the slice [h·64, (h+1)·64): 12 heads × D = 64", size=12))
    stages = [  # (name, shape, GPT-2 small's shape), then how the next stage is made from this one
        ("x", "[B, T, C]", "[1, 5, 768]"), "c_attn, then split into q, k, v",
        ("q (k, v alike)", "[B, T, C]", "[1, 5, 768]"), "reshape: name the slices",
        ("", "[B, T, H, D]", "[1, 5, 12, 64]"), "transpose(1, 2): heads to the front",
        ("split_heads(q)", "[B, H, T, D]", "[1, 12, 5, 64]"), "attend: each head on its own",
        ("y", "[B, H, T, D]", "[1, 12, 5, 64]"), "transpose(1, 2): tokens back to the front",
        ("", "[B, T, H, D]", "[1, 5, 12, 64]"), "reshape: glue the slices",
        ("merge_heads(y)", "[B, T, C]", "[1, 5, 768]"), "c_proj: one linear layer mixes the heads",
        ("attention's output", "[B, T, C]", "[1, 5, 768]"),
    ]
    top, box_h, step = 104, 34, 56
    boxes, hows = stages[::2], stages[1::2]
    for s, (name, shape, example) in enumerate(boxes):
        y = top + s * step
        fill = NEW if s in (3, 4) else CACHED
        body.append(_rect(left + 120, y, 200, box_h, fill, rx=6))
        body.append(_text(left + 220, y + 22, shape, size=15, weight="600"))
        body.append(_text(left + 110, y + 22, name, anchor="end", size=13))
        body.append(_text(left + 330, y + 22, example, anchor="start", size=13))
    for s, how in enumerate(hows):
        y = top + s * step
        body.append(_arrow(left + 220, y + box_h + 1, left + 220, y + step - 1))
        body.append(_text(left + 232, y + box_h + 16, how, anchor="start", size=12))
    bottom = top + (len(boxes) - 1) * step + box_h
    body.append(_text(left, bottom + 26, "B batch, T tokens, H heads, D = C / H per head; "
                      "the example is GPT-2 small on 5 tokens", anchor="start", size=12))
    return _svg(left + width + 30, bottom + 40, "Splitting attention into heads and merging them back", body)


def block() -> str:
    """GPT-2's pre-norm block: the residual stream, and two sublayers that read a normalized copy."""
    body = [ARROW_DEF]
    x_stream, x_side, w = 190, 370, 150  # the sums' labels, at the stream's left, need about 160 px
    body.append(_text(x_stream, 22, "x  [B, T, C]", size=14, weight="600"))
    plus = []
    for k, (norm, sub, y0) in enumerate([("ln_1", "attn", 60), ("ln_2", "mlp", 210)]):
        # Branch out of the stream, through the norm and the sublayer, back into the sum.
        body.append(f'<path d="M{x_stream},{y0} H{x_side - w / 2 - 4}" stroke="currentColor" stroke-width="1.5" '
                    'fill="none" marker-end="url(#arrow)"/>')
        body.append(_rect(x_side - w / 2, y0 - 16, w, 32, CACHED, rx=6))
        body.append(_text(x_side, y0 + 5, f"{norm} (LayerNorm)", size=13))
        body.append(_arrow(x_side, y0 + 16, x_side, y0 + 40))
        body.append(_rect(x_side - w / 2, y0 + 42, w, 32, NEW, rx=6))
        body.append(_text(x_side, y0 + 63, sub, size=14, weight="600"))
        body.append(f'<path d="M{x_side},{y0 + 74} V{y0 + 100} H{x_stream + 14}" stroke="currentColor" '
                    'stroke-width="1.5" fill="none" marker-end="url(#arrow)"/>')
        plus.append(y0 + 100)
    for k, y in enumerate(plus):
        body.append(f'<circle cx="{x_stream}" cy="{y}" r="13" fill="none" stroke="currentColor" stroke-width="1.5"/>')
        body.append(_text(x_stream, y + 6, "+", size=18, weight="600"))
        label = "h = x + attn(ln_1(x))" if k == 0 else "out = h + mlp(ln_2(h))"
        body.append(_text(x_stream - 22, y + 5, label, anchor="end", size=13))
    body.append(_arrow(x_stream, 30, x_stream, plus[0] - 14))
    body.append(_arrow(x_stream, plus[0] + 13, x_stream, plus[1] - 14))
    body.append(_arrow(x_stream, plus[1] + 13, x_stream, plus[1] + 52))
    body.append(_text(x_stream, plus[1] + 70, "out  [B, T, C]", size=14, weight="600"))
    body.append(_text(x_side + w / 2 + 14, 70, "the sublayers read a", anchor="start", size=12))
    body.append(_text(x_side + w / 2 + 14, 86, "normalized copy; the", anchor="start", size=12))
    body.append(_text(x_side + w / 2 + 14, 102, "stream itself is never", anchor="start", size=12))
    body.append(_text(x_side + w / 2 + 14, 118, "normalized inside a block", anchor="start", size=12))
    return _svg(640, plus[1] + 84, "The pre-norm transformer block", body)


#: file name → what it draws
FILES = {"causal_mask.svg": causal_mask, "kv_cache.svg": kv_cache, "heads.svg": heads, "block.svg": block}


def rendered() -> dict[str, str]:
    return {name: draw() for name, draw in FILES.items()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stale = []
    for name, text in rendered().items():
        path = DIAGRAMS / name
        if "--check" in argv:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"stale diagrams: {', '.join(stale)}; run `python -m course.authoring.diagrams`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
