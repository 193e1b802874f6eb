#!/usr/bin/env bash
# 2026-12-05 (session 2): BF16 overlay as bf16 tiles in wgmma's canonical layout, prefill GEMM
# with both operands by descriptor. Three builds in one process each, cuBLAS in each:
# bin/denseffn-base = main 59fee82, bin/denseffn-v1 = 3171d44 (descriptors, a chunk's wgmmas
# waited for at its end), bin/denseffn = the chunk's wgmmas in flight into the next (tests are
# this build's). `cargo xtask gpu-bundle --gpu-only --base main` + denseffn-v1. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
DENSEFFN_GPU_TEST_OVERLAYS=bf16 timeout 150 "$here/bin/test-gpu" --test-threads=1 overlays_match prefill_split_k > "$out/t-bf16-full.log" 2>&1; echo "bf16 full rc=$?"
grep -E "test result|panicked|FAILED" "$out/t-bf16-full.log" | cut -c1-200 | head -12
DENSEFFN_GPU_TEST_SMALL=1 timeout 100 "$here/bin/test-gpu" --test-threads=1 > "$out/t-small.log" 2>&1; echo "small rc=$?"
grep -E "test result|panicked|FAILED" "$out/t-small.log" | cut -c1-200 | head -8
pack
A="bench --backend cuda --shapes 8b,70b --formats bf16 --m 1,8 --n 128,512,4096"
for b in base v1 new; do
  bin="$here/bin/denseffn-$b"; [ "$b" = new ] && bin="$here/bin/denseffn"
  timeout 120 "$bin" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"
done
rm -f "$out"/*/*.svg "$out"/*/bench.json
"$here/bin/denseffn" compare "$out/base" "$out/v1" --out "$out/ab-v1.md" >/dev/null
"$here/bin/denseffn" compare "$out/base" "$out/new" --out "$out/ab-new.md" >/dev/null
for f in ab-v1 ab-new; do echo "== $f"; grep -E "\| (forward|forward_km\(8\)|forward_prefill)" "$out/$f.md" | cut -c1-130 | head -14; done
grep -E "prefill" "$out/new/bench.md" | cut -c1-160 | head -8
pack
B="$here/bin/denseffn bench --backend cuda --shapes 8b --formats bf16 --m 1 --n 4096 --quick --out /tmp/b"
timeout 100 ncu --clock-control none -k regex:'bf16_gemm' -c 2 --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy $B > "$out/ncu.txt" 2>&1; echo "ncu rc=$?"
grep -E "bf16_gemm|Duration|Throughput|Issue Slots|Registers|Achieved Occ" "$out/ncu.txt" | cut -c1-140 | head -30
pack
