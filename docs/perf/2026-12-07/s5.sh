#!/usr/bin/env bash
# 2026-12-07 s5 (one call, ≤ 600 s): the persistent BF16 GEMM (p) and the persistent GEMM with
# its activations loaded by TMA through a tensor map in the parameter block (pt), against main.
# (1) small-shape BF16 overlay + tail-split tests of pt; if they fail, of p; (2) full shapes
# of the one that passed: the overlay test, the tail split (with its 3-block capped grid),
# split-K (every format), entry points, sampled prefill; (3) `denseffn bench` (not --quick):
# main, p, pt, bf16 8B and 70B, N 512/4096, cuBLAS in each process; (4) ncu of pt's two
# kernels at 8B N = 4096 (source-level stall sampling); (5) the other GPU tests of pt with the
# seconds left.
. "$(dirname "$0")/lib.sh"
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
ok=""
for v in pt p; do
  DENSEFFN_GPU_TEST_SMALL=1 t small-$v 40 "$here/bin/test-gpu-$v" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail
  if grep -q "test result: ok" "$out/small-$v.log"; then ok=$v; break; fi
done
echo "passed small: ${ok:-none}"
[ -n "$ok" ] && t full-$ok 120 "$here/bin/test-gpu-$ok" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k every_kernel prefill_matches
b "" 90 --shapes 8b,70b --n 512,4096
for v in p pt; do
  b -$v 90 --shapes 8b,70b --n 512,4096
  "$here/bin/denseffn" compare "$out/bench.json" "$out/bench-$v.json" --out "$out/cmp-$v.md" > /dev/null 2>&1; grep -E "prefill" "$out/cmp-$v.md" | head -8
done
s=$SECONDS; timeout 70 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SourceCounters -k 'regex:^bf16_gemm' --launch-count 2 -o "$out/ncu-pt" "$here/bin/denseffn-pt" bench --backend cuda --shapes 8b --formats bf16 --m 1 --n 4096 --quick --out /tmp/r > "$out/ncu-run.log" 2>&1; echo "== ncu rc=$? $((SECONDS-s))s"
ncu -i "$out/ncu-pt.ncu-rep" > "$out/ncu-pt.txt" 2>&1
ncu -i "$out/ncu-pt.ncu-rep" --page source --csv --print-source sass > "$out/ncu-src.csv" 2>"$out/ncu-src.err"; echo "src rc=$? $(wc -l < "$out/ncu-src.csv") lines"
grep -E "Duration|Compute \(SM\)|L2 Cache Th|L1/TEX Cache|Warp Cycles Per Issued" "$out/ncu-pt.txt" | head -12
python3 "$here/stalls.py" "$out/ncu-src.csv" > "$out/stalls.txt" 2>&1; head -30 "$out/stalls.txt"
left=$((575 - SECONDS)); [ "$ok" = pt ] && [ $left -gt 30 ] && t test-gpu-pt $left "$here/bin/test-gpu-pt" --test-threads=1 --nocapture --skip overlays_match --skip prefill_gate_up_tail --skip prefill_split_k --skip every_kernel --skip prefill_matches
