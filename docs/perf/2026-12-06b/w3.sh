#!/usr/bin/env bash
# 2026-12-06 w3: wide bf16 down + vectorized split-K sums + gate+up tail split (branch bf16-wide):
# correctness, A/B vs main, the tail split alone (DENSEFFN_GEMM_TAIL_SPLIT=0), ncu.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "test result|panicked|ERROR SUMMARY|RACECHECK SUMMARY|worst|rel L2" "$out/$name.log" | cut -c1-160 | tail -14; }
t tail 60 "$here/bin/test-gpu" --test-threads=1 --nocapture prefill_gate_up_tail prefill_split_k
grep -q "test result: ok" "$out/tail.log" || { echo "tail failed: stop"; exit 1; }
t racecheck 120 compute-sanitizer --tool racecheck --racecheck-report all "$here/bin/test-gpu" --test-threads=1 prefill_gate_up_tail
DENSEFFN_GPU_TEST_OVERLAYS=bf16 t full 120 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match
s=$SECONDS; OUT="$out/ab" timeout 200 bash "$here/run.sh" ab --shapes 8b,70b --formats bf16,fp8,nvfp4 --m 1 --n 128,512,4096 --quick > "$out/ab.log" 2>&1; echo "== ab rc=$? $((SECONDS-s))s"
cp "$out/ab/ab.md" "$out/ab.md"; cp "$out/ab/ab-new/bench.md" "$out/bench-new.md"; rm -rf "$out/ab"
grep -E "prefill" "$out/ab.md" | head -30
s=$SECONDS; DENSEFFN_GEMM_TAIL_SPLIT=0 timeout 60 "$here/bin/denseffn" bench --backend cuda --quick --shapes 8b,70b --formats bf16 --m 1 --n 128,512,4096 --out /tmp/nt > "$out/notail.log" 2>&1; echo "== notail rc=$? $((SECONDS-s))s"
cp /tmp/nt/bench.md "$out/bench-notail.md"; grep -E "prefill|cuBLAS" "$out/bench-notail.md" | head -20
grep -E "prefill|cuBLAS" "$out/bench-new.md" | head -30
[ $SECONDS -gt 470 ] && { echo "no time for ncu"; exit 0; }
sec="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis"
s=$SECONDS
timeout $((585 - SECONDS)) ncu $sec -k 'regex:bf16_gemm|nvjet_sm90_tst_[0-9]+x[0-9][0-9][0-9]_' --launch-count 4 "$here/bin/denseffn" bench --backend cuda --quick --shapes 8b --formats bf16 --m 1 --n 4096 --out /tmp/r1 > "$out/ncu-bf16.txt" 2>&1
echo "== ncu rc=$? $((SECONDS-s))s"
grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|No Eligible|Warp Cycles Per Issued" "$out/ncu-bf16.txt" | head -60
