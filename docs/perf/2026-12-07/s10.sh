#!/usr/bin/env bash
# 2026-12-07 s10 (≤ 560 s), for the next device call, best on an H200 (the README's table is
# the H200's): main's BF16 prefill (persistent + TMA, landed a2706f1) with cuBLAS in the same
# process — 8B and 70B, N 128/512/2048/4096, not --quick — plus the FP8 × FP8 arm in the same
# run; then ncu of the BF16 8B N = 512 forward_prefill (both kernels: durations, SM / L2 / L1
# throughput, warp stall reasons, source-level stall samples) to see where 0.73× goes at N = 512.
# Needs bin/denseffn (main) and stalls.py beside it. Everything lands in r.tgz.
. "$(dirname "$0")/lib.sh"
s=$SECONDS; timeout 200 "$here/bin/denseffn" bench --backend cuda --shapes 8b,70b --formats bf16,fp8 --m 1 --n 128,512,2048,4096 --out "$out/rep" > "$out/rep.log" 2>&1; echo "== bench rc=$? $((SECONDS-s))s"
grep -E "prefill" "$out/rep/bench.md" | cut -d'|' -f2,3,4,6,7,8,9,10
DENSEFFN_FFN_W8A8=1 timeout 120 "$here/bin/denseffn" bench --backend cuda --shapes 8b,70b --formats fp8 --m 1 --n 512,4096 --out "$out/rep-w8a8" > "$out/rep-w8a8.log" 2>&1; echo "== bench w8a8 rc=$?"
grep -E "prefill" "$out/rep-w8a8/bench.md" | cut -d'|' -f2,3,4,6,7,8,9,10
s=$SECONDS; timeout 150 ncu --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats -k 'regex:^bf16_gemm' --launch-count 2 -o "$out/ncu" "$here/bin/denseffn" bench --backend cuda --shapes 8b --formats bf16 --m 1 --n 512 --quick --out /tmp/r > "$out/ncu-run.log" 2>&1; echo "== ncu rc=$? $((SECONDS-s))s"
ncu -i "$out/ncu.ncu-rep" > "$out/ncu.txt" 2>&1
grep -E "bf16_gemm|Duration|Compute \(SM\)|L2 Cache Th|L1/TEX Cache|Warp Cycles Per Issued|Grid Size|Registers" "$out/ncu.txt" | head -24
ncu -i "$out/ncu.ncu-rep" --page source --csv --print-source sass > "$out/ncu-src.csv" 2>/dev/null
python3 "$here/stalls.py" "$out/ncu-src.csv" 20 > "$out/stalls.txt" 2>&1; head -50 "$out/stalls.txt"
tar czf /tmp/r.tgz -C "$out" --exclude=ncu-src.csv --exclude=ncu.ncu-rep . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
