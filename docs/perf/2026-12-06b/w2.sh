#!/usr/bin/env bash
# 2026-12-06 w2: wide bf16 down + vectorized split-K reduction: correctness, A/B vs main, ncu.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "test result|panicked|ERROR SUMMARY|RACECHECK SUMMARY|worst|rel" "$out/$name.log" | cut -c1-200 | tail -12; }
DENSEFFN_GPU_TEST_OVERLAYS=bf16 DENSEFFN_GPU_TEST_SMALL=1 t small 60 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match
grep -q "test result: ok" "$out/small.log" || { echo "small failed: stop"; exit 1; }
t splitk 150 "$here/bin/test-gpu" --test-threads=1 --nocapture prefill_split_k
DENSEFFN_GPU_TEST_SMALL=1 t racecheck 90 compute-sanitizer --tool racecheck --racecheck-report all "$here/bin/test-gpu" --test-threads=1 prefill_split_k
s=$SECONDS; OUT="$out/ab" timeout 240 bash "$here/run.sh" ab --shapes 8b,70b --formats bf16,fp8,nvfp4 --m 1 --n 128,512,4096 --quick > "$out/ab.log" 2>&1; echo "== ab rc=$? $((SECONDS-s))s"
cp "$out/ab/ab.md" "$out/ab.md"; cp "$out/ab/ab-new/bench.md" "$out/bench-new.md"; cp "$out/ab/ab-base/bench.md" "$out/bench-base.md"; rm -rf "$out/ab"
grep -E "prefill" "$out/ab.md" | head -30
grep -iE "cublas" "$out/bench-new.md" | head -20
[ $SECONDS -gt 450 ] && { echo "no time for ncu"; exit 0; }
sec="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
s=$SECONDS
timeout $((580 - SECONDS)) ncu $sec -k 'regex:bf16_gemm|nvjet_sm90_tst_[0-9]+x[0-9][0-9][0-9]_' --launch-count 4 "$here/bin/denseffn" bench --backend cuda --quick --shapes 8b --formats bf16 --m 1 --n 4096 --out /tmp/r1 > "$out/ncu-bf16.txt" 2>&1
echo "== ncu rc=$? $((SECONDS-s))s"
grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" "$out/ncu-bf16.txt" | head -60
