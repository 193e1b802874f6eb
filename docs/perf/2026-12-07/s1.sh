#!/usr/bin/env bash
# 2026-12-07 s1: (1) the persistent BF16 GEMM build (p): small-shape BF16 overlay test, then full
# shapes with the tail-split, split-K and entry-point tests; (2) bench of main and p (bf16, 8B and
# 70B, N 128/512/4096, cuBLAS in each process); (3) ncu source-level stall sampling of main's
# gate+up and down at 8B N=4096; (4) diagnostic builds of main that skip copies (wrong results,
# timing only): nx = no activation cp.async, nw = no weight bulk copies, nxw = neither;
# (5) if p failed: the compact tail-split grid (cg) instead.
. "$(dirname "$0")/lib.sh"
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
DENSEFFN_GPU_TEST_SMALL=1 t small-p 40 "$here/bin/test-gpu-p" --test-threads=1 --nocapture overlays_match
ok=0; grep -q "test result: ok" "$out/small-p.log" && ok=1
if [ $ok = 1 ]; then t full-p 120 "$here/bin/test-gpu-p" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k every_kernel prefill_matches; fi
b "" 70 --quick --shapes 8b,70b --n 128,512,4096
if [ $ok = 1 ]; then b -p 70 --quick --shapes 8b,70b --n 128,512,4096; "$here/bin/denseffn" compare "$out/bench.json" "$out/bench-p.json" --out "$out/cmp-p.md" > /dev/null 2>&1; grep -E "prefill" "$out/cmp-p.md" | head -8; fi
s=$SECONDS; timeout 100 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis -k 'regex:^bf16_gemm' --launch-count 2 -o "$out/ncu-main" "$here/bin/denseffn" bench --backend cuda --shapes 8b --formats bf16 --m 1 --n 4096 --quick --out /tmp/r > "$out/ncu-run.log" 2>&1; echo "== ncu rc=$? $((SECONDS-s))s"
ncu -i "$out/ncu-main.ncu-rep" > "$out/ncu-main.txt" 2>&1
ncu -i "$out/ncu-main.ncu-rep" --page source --csv --print-source sass > "$out/ncu-src.csv" 2>"$out/ncu-src.err"; echo "src rc=$? $(wc -l < "$out/ncu-src.csv") lines"; head -c 400 "$out/ncu-src.err"
grep -E "Duration|Compute \(SM\)|L2 Cache Th|L1/TEX Cache|Issue Slots|Warp Cycles Per Issued" "$out/ncu-main.txt" | head -20
for v in -nx -nw -nxw; do b "$v" 35 --quick --shapes 8b --n 512,4096; done
if [ $ok = 0 ]; then
  DENSEFFN_GPU_TEST_SMALL=1 t small-cg 40 "$here/bin/test-gpu-cg" --test-threads=1 --nocapture overlays_match
  b -cg 70 --quick --shapes 8b,70b --n 128,512,4096; "$here/bin/denseffn" compare "$out/bench.json" "$out/bench-cg.json" --out "$out/cmp-cg.md" > /dev/null 2>&1; grep -E "prefill" "$out/cmp-cg.md" | head -8
fi
# (6) with the time left (the call's limit is 600 s): every other GPU test of the p build.
if [ $ok = 1 ]; then left=$((570 - SECONDS)); [ $left -gt 30 ] && t test-gpu-p $left "$here/bin/test-gpu-p" --test-threads=1 --nocapture --skip overlays_match; fi
