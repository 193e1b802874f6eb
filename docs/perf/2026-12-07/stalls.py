#!/usr/bin/env python3
"""Summarizes `ncu --page source --csv --print-source sass` output: the SASS instructions with the
most warp-stall samples, per kernel section when the CSV holds several. Usage: stalls.py FILE [N]."""
import csv, sys, io

def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25
    text = open(path, encoding="utf-8", errors="replace").read()
    # Several kernels: blocks separated by non-CSV header lines ("Kernel Name" ...).
    blocks, cur = [], []
    for line in text.splitlines():
        if line.startswith('"#') or line.startswith('"Address') or line.startswith('"Source'):
            if cur:
                blocks.append(cur)
            cur = [line]
        elif line.startswith('"'):
            cur.append(line)
        else:
            if cur:
                blocks.append(cur)
                cur = []
            print(line[:200])
    if cur:
        blocks.append(cur)
    for b in blocks:
        rows = list(csv.reader(io.StringIO("\n".join(b))))
        head, body = rows[0], rows[1:]
        def col(*names):
            for n in names:
                for i, h in enumerate(head):
                    if n.lower() in h.lower():
                        return i
            return None
        src = col("Source")
        samp = col("Warp Stall Sampling (All Samples)", "Sampling Data (All)", "stall_sampling")
        nsamp = col("Warp Stall Sampling (Not-issued Samples)", "Sampling Data (Not Issued)")
        if samp is None:
            print("columns:", head[:40])
            continue
        def num(v):
            try:
                return float(v.replace(",", ""))
            except ValueError:
                return 0.0
        total = sum(num(r[samp]) for r in body if len(r) > samp)
        print(f"== {len(body)} instructions, {total:.0f} samples; columns: {len(head)}")
        # Stall-reason columns: any header with 'stall' that is numeric.
        ranked = sorted(body, key=lambda r: -num(r[samp]) if len(r) > samp else 0)
        for r in ranked[:top]:
            s = num(r[samp])
            ns = num(r[nsamp]) if nsamp is not None else 0
            print(f"{100*s/max(total,1):5.1f}% {s:8.0f} {ns:8.0f}  {r[0][:8]}  {r[src][:90] if src is not None else ''}")

main()
