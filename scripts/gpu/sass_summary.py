#!/usr/bin/env python3
"""Summarises Nsight Compute's source view of one or more kernels, as
written by `ncu -i REPORT --page source --csv --print-source sass`: for each
kernel its executed instructions and stall samples, the opcodes that
execute and stall most, and its hot segments (runs of SASS instructions
executed equally often: a loop body, an unrolled epilogue), the way the
twenty-third session found attn_flash's address arithmetic and its
epilogue's instruction-fetch stalls (docs/gpu.md, measure.sh ncu-source).

Usage: scripts/gpu/sass_summary.py SOURCE.csv [--segments N] [--show LO-HI]
"""
import argparse
import csv
import io
import signal
import sys
from collections import Counter

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under head


def kernels(path):
    """Yields (name, rows) per kernel section of the CSV; lines before the
    first section (a warning ncu printed) are skipped."""
    name, lines = None, []
    with open(path, newline="") as f:
        for line in f:
            if line.startswith('"Kernel Name"'):
                if name is not None:
                    yield name, list(csv.reader(io.StringIO("".join(lines))))
                head = next(csv.reader([line]))
                name, lines = (head[1] if len(head) > 1 else "?"), []
            elif name is not None:
                lines.append(line)
    if name is not None:
        yield name, list(csv.reader(io.StringIO("".join(lines))))


def number(s):
    s = s.replace(",", "")
    return int(s) if s.isdigit() else 0


def opcode(sass):
    words = sass.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def summarise(name, rows, segments, show):
    head, body = rows[0], [r for r in rows[1:] if len(r) > 2]
    if "Instructions Executed" not in head or "Warp Stall Sampling (All Samples)" not in head:
        print(f"== {name}: no instruction counts (was the report taken with --section SourceCounters?)")
        return
    ex = head.index("Instructions Executed")
    st = head.index("Warp Stall Sampling (All Samples)")
    body = [r for r in body if len(r) > max(ex, st)]
    total = sum(number(r[ex]) for r in body) or 1
    stalls = sum(number(r[st]) for r in body) or 1
    print(f"== {name}: {len(body)} SASS instructions, {total:,} executed, {stalls:,} stall samples")
    ops, opstall = Counter(), Counter()
    for r in body:
        op = opcode(r[1].strip())
        ops[op] += number(r[ex])
        opstall[op] += number(r[st])
    print("   opcode      executed  stalls")
    for op, _ in sorted(ops.items(), key=lambda kv: -max(kv[1] / total, opstall[kv[0]] / stalls))[:14]:
        print(f"   {op:10s} {100 * ops[op] / total:7.1f}% {100 * opstall[op] / stalls:6.1f}%")
    runs, start = [], 0
    for i in range(1, len(body) + 1):
        if i == len(body) or number(body[i][ex]) != number(body[start][ex]):
            runs.append((start, i - 1))
            start = i
    ranked = sorted(runs, key=lambda r: -max(number(body[r[0]][ex]) * (r[1] - r[0] + 1) / total,
                                             sum(number(body[j][st]) for j in range(r[0], r[1] + 1)) / stalls))
    print("   hot segments (SASS lines, instructions, executions each, share of executed, of stalls, first instruction):")
    for lo, hi in sorted(ranked[:segments]):
        n = number(body[lo][ex])
        s = sum(number(body[j][st]) for j in range(lo, hi + 1))
        print(f"   {lo:6d}-{hi:<6d} {hi - lo + 1:5d} {n:12,} {100 * n * (hi - lo + 1) / total:6.1f}% {100 * s / stalls:6.1f}%  {body[lo][1].strip()[:48]}")
    if show:
        lo, hi = show
        for j in range(lo, min(hi, len(body) - 1) + 1):
            print(f"   {j:6d} {number(body[j][ex]):12,} {number(body[j][st]):7,}  {body[j][1].strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--segments", type=int, default=12, help="hot segments to list a kernel")
    ap.add_argument("--show", help="print SASS lines LO-HI of each kernel with their counts")
    a = ap.parse_args()
    show = tuple(int(x) for x in a.show.split("-")) if a.show else None
    found = False
    for name, rows in kernels(a.csv):
        found = True
        if rows:
            summarise(name, rows, a.segments, show)
    if not found:
        sys.exit(f"{a.csv}: no kernel sections (was it written by ncu --page source --csv --print-source sass?)")


if __name__ == "__main__":
    main()
