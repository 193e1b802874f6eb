#!/usr/bin/env bash
# 2026-12-05: verify on the H200 what 2026-12-04 could not run. Bundle: `cargo xtask gpu-bundle
# --gpu-only --base 408bd01` on branch q4k-frag (main 7731c83 + the Q4_K 3-instruction fragments).
# Q2_0 kernels of the head = main's 1938fbc (3 chunks in flight, no launch bound); Q4_K kernels of
# 408bd01 = main's. So one A/B covers both changes. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
DENSEFFN_GPU_TEST_OVERLAYS=q2 timeout 150 "$T" --test-threads=1 --nocapture overlays_match > "$out/t-q2-full.log" 2>&1; echo "q2 full rc=$?"; grep -E "test result|panicked|Q2" "$out/t-q2-full.log" | cut -c1-200 | head -6
DENSEFFN_GPU_TEST_OVERLAYS=q4k timeout 150 "$T" --test-threads=1 --nocapture overlays_match > "$out/t-q4k-full.log" 2>&1; echo "q4k full rc=$?"; grep -E "test result|panicked|Q4k" "$out/t-q4k-full.log" | cut -c1-220 | head -6
pack
A="bench --backend cuda --shapes 8b,32b,70b --formats q2_0,q4k --m 1,2,4,8 --n 512"
for b in denseffn-base denseffn; do timeout 110 "$here/bin/$b" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; done
rm -f "$out"/*/*.svg
"$here/bin/denseffn" compare "$out/denseffn-base" "$out/denseffn" --out "$out/ab.md" >/dev/null; grep -E "forward|km|prefill" "$out/ab.md" | head -40
rm -f "$out"/*/bench.json
pack
