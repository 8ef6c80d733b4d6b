#!/usr/bin/env python3
"""Where a fused kernel's warps stall, by line of its generated source.

    bench/ncu_lines.py SASS_CSV DISASM SOURCE [--min PERCENT]

SASS_CSV: `ncu --import R.ncu-rep --page source --csv --print-source sass` of one launch profiled
with `--section SourceCounters`; DISASM: `nvdisasm -gi` of the same cubin (built with
CF_LINEINFO=1, so it carries line tables); SOURCE: that kernel's generated source
(`comfuse emit` with the same options).  Rows are matched by their offset from the kernel's
first instruction.  Prints, per source line with at least --min percent (default 0.5) of all
stall samples: the share, instructions executed, and the four largest stall reasons.
bench/ncu-lines.sh runs the whole chain on the GPU machine.
"""
import collections
import csv
import re
import sys


def disasm_lines(path, source_name):
    """{offset: generated-source line} for cf_gemm_kernel's instructions."""
    lines, in_text, pending, cur = {}, False, [], None
    for text in open(path, errors="replace"):
        if text.lstrip().startswith(".section"):
            in_text = ".text.cf_gemm_kernel" in text
        if not in_text:
            continue
        if "//## File" in text:
            pending.append(text)
            continue
        m = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(\S.*)$", text)
        if not m or m.group(2).startswith("."):
            continue
        if pending:   # the innermost frame in the generated source names the line
            cur = None
            for b in pending:
                mm = re.search(re.escape(source_name) + r'", line (\d+)', b)
                if mm:
                    cur = int(mm.group(1))
                    break
            pending = []
        lines[int(m.group(1), 16)] = cur
    return lines


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    min_pct = float(argv[argv.index("--min") + 1]) if "--min" in argv else 0.5
    rows = list(csv.reader(open(argv[1])))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    cols = {h: i for i, h in enumerate(rows[head])}
    data = [r for r in rows[head + 1:] if len(r) == len(rows[head])]
    src_lines = open(argv[3]).read().split("\n")
    # the line tables name the source as NVRTC was given it: any path ending in a name the
    # source's first comment mentions is fine; take the file name the disassembly uses most
    names = collections.Counter(re.findall(r'File "([^"]+)", line', open(argv[2], errors="replace").read()))
    gen = next((n for n, _ in names.most_common() if not n.endswith(".cuh")), "")
    at = disasm_lines(argv[2], gen)
    base = int(data[0][cols["Address"]], 16)
    reasons = [h for h in cols if h.startswith("stall_") and "(Not" not in h]
    samples, executed = collections.Counter(), collections.Counter()
    why = collections.defaultdict(collections.Counter)
    unmatched = 0
    for r in data:
        off = int(r[cols["Address"]], 16) - base
        if off not in at:
            unmatched += 1
        line = at.get(off)
        samples[line] += int(r[cols["Warp Stall Sampling (All Samples)"]] or 0)
        executed[line] += int(r[cols["Instructions Executed"]] or 0)
        for h in reasons:
            v = int(r[cols[h]] or 0)
            if v:
                why[line][h[len("stall_"):]] += v
    total = sum(samples.values()) or 1
    print("%d stall samples over %d instructions (%d not in the disassembly); source %s"
          % (total, len(data), unmatched, gen or "?"))
    print("%6s %7s %12s  %-64s %s" % ("line", "share", "executed", "source", "stall reasons"))
    for line in sorted(samples, key=lambda x: (x is None, x or 0)):
        if 100.0 * samples[line] / total < min_pct:
            continue
        text = src_lines[line - 1].strip()[:64] if line and line <= len(src_lines) else "(headers, mainloop, producer)"
        top = " ".join("%s:%d" % kv for kv in why[line].most_common(4))
        print("%6s %6.1f%% %12d  %-64s %s" % (line or "-", 100.0 * samples[line] / total, executed[line], text, top))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
