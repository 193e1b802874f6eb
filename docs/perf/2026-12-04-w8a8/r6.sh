#!/usr/bin/env bash
# 2026-12-04 (evening): w8a8 gate+up with skewed projections (branch w8a8-skew) vs main 245fe31 (bin/denseffn-base):
# A/B bench, GPU tests, sanitizers, DRAM bytes per kernel. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
DENSEFFN_GPU_TEST_SMALL=1 timeout 60 "$T" --test-threads=1 --nocapture w8a8 > "$out/t-gpu-w8a8-small.log" 2>&1; echo "test-gpu w8a8 (small) rc=$?"; grep -E "test result|FAILED|panicked|worst|differing" "$out/t-gpu-w8a8-small.log" | cut -c1-300 | head
A="bench --backend cuda --shapes 8b,70b --formats fp8_w8a8 --m 1 --n 128,512,2048,4096 --quick"
for b in denseffn-base denseffn; do timeout 100 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -i "prefill" "$out/ab.md" | head -20
grep -A10 "| model | format | path | N |" "$out/denseffn/bench.md" | head -12
pack
B="$here/bin/denseffn bench --backend cuda --shapes 8b --formats fp8_w8a8 --m 1 --n 4096 --quick --out /tmp/b"
timeout 120 ncu --clock-control none -k regex:'w8a8_gemm' -c 2 --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio $B > "$out/ncu-metrics.txt" 2>&1; echo "ncu rc=$?"
grep -E "w8a8_gemm|duration|dram__bytes|lts__t_bytes|issue_active|stalled" "$out/ncu-metrics.txt" | cut -c1-140 | head -20
pack
timeout 90 "$T" --test-threads=1 --nocapture w8a8 > "$out/t-gpu-w8a8.log" 2>&1; echo "test-gpu w8a8 (full) rc=$?"; grep -E "test result|FAILED|panicked|worst|differing" "$out/t-gpu-w8a8.log" | cut -c1-300 | head
pack
for tool in racecheck memcheck; do
  DENSEFFN_GPU_TEST_SMALL=1 timeout 90 compute-sanitizer --tool $tool --error-exitcode 1 "$T" --test-threads=1 w8a8 > "$out/san-$tool.log" 2>&1; echo "$tool rc=$?"; tail -n 2 "$out/san-$tool.log"
done
pack
