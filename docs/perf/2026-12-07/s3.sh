#!/usr/bin/env bash
# 2026-12-07 s3 (s1 cut to one call of at most 600 s, the device being scarce): the persistent
# BF16 GEMM build (p) checked and measured against main in one call:
# (1) small-shape BF16 overlay test of p; (2) full shapes: the overlay test, the tail-split test
# (with its 3-block capped grid), split-K (every format), entry points, sampled prefill;
# (3) `denseffn bench` (not --quick) of main, then p: bf16, 8B and 70B, N 512/4096, cuBLAS in
# each process; (4) ncu of p's gate+up and down at 8B N = 4096 (source-level stall sampling);
# (5) diagnostic builds of p (wrong results, timing only): pnx = no activation cp.async,
# pnxw = no copies at all; (6) with the time left, every other GPU test of p.
. "$(dirname "$0")/lib.sh"
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
DENSEFFN_GPU_TEST_SMALL=1 t small-p 40 "$here/bin/test-gpu-p" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail
ok=0; grep -q "test result: ok" "$out/small-p.log" && ok=1
[ $ok = 1 ] && t full-p 120 "$here/bin/test-gpu-p" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k every_kernel prefill_matches
b "" 90 --shapes 8b,70b --n 512,4096
if [ $ok = 1 ]; then
  b -p 90 --shapes 8b,70b --n 512,4096
  "$here/bin/denseffn" compare "$out/bench.json" "$out/bench-p.json" --out "$out/cmp-p.md" > /dev/null 2>&1; grep -E "prefill" "$out/cmp-p.md" | head -8
  s=$SECONDS; timeout 70 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SourceCounters -k 'regex:^bf16_gemm' --launch-count 2 -o "$out/ncu-p" "$here/bin/denseffn-p" bench --backend cuda --shapes 8b --formats bf16 --m 1 --n 4096 --quick --out /tmp/r > "$out/ncu-run.log" 2>&1; echo "== ncu rc=$? $((SECONDS-s))s"
  ncu -i "$out/ncu-p.ncu-rep" > "$out/ncu-p.txt" 2>&1
  ncu -i "$out/ncu-p.ncu-rep" --page source --csv --print-source sass > "$out/ncu-src.csv" 2>"$out/ncu-src.err"; echo "src rc=$? $(wc -l < "$out/ncu-src.csv") lines"; head -c 300 "$out/ncu-src.err"
  grep -E "Duration|Compute \(SM\)|L2 Cache Th|L1/TEX Cache|Warp Cycles Per Issued" "$out/ncu-p.txt" | head -12
  for v in -pnx -pnxw; do b "$v" 35 --quick --shapes 8b --n 512,4096; done
  left=$((575 - SECONDS)); [ $left -gt 30 ] && t test-gpu-p $left "$here/bin/test-gpu-p" --test-threads=1 --nocapture --skip overlays_match --skip prefill_gate_up_tail --skip prefill_split_k --skip every_kernel --skip prefill_matches
fi
