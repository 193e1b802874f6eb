#!/usr/bin/env bash
# 2026-12-04 (night): Q2_0 decode GEMV with per-tile scaling (branch q2-chunk) vs main 93567c8:
# full-shape Q2 overlay tests, A/B decode bench, memcheck. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
DENSEFFN_GPU_TEST_OVERLAYS=q2 timeout 150 "$T" --test-threads=1 --nocapture overlays_match > "$out/t-q2-full.log" 2>&1; echo "q2 full rc=$?"; grep -E "test result|panicked|Q2" "$out/t-q2-full.log" | cut -c1-220 | head
pack
A="bench --backend cuda --shapes 8b,32b,70b --formats q2_0 --m 1,2,4,8 --n 128"
for b in denseffn-base denseffn; do timeout 100 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -E "forward|km" "$out/ab.md" | head -40
rm -f "$out"/*/bench.json
pack
DENSEFFN_GPU_TEST_OVERLAYS=q2 DENSEFFN_GPU_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 "$T" --test-threads=1 overlays_match > "$out/san-memcheck.log" 2>&1; echo "memcheck rc=$?"; tail -n 2 "$out/san-memcheck.log"
pack
