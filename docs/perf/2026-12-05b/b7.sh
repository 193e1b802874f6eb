#!/usr/bin/env bash
# 2026-12-05 (session 3): b6 again after its H100 run found the PAIR down GEMM on a 736-byte stack (16 ms at 8B N=4096).
# Four builds, one process each, cuBLAS bf16 FFN in each:
#   bin/denseffn-base = main 59fee82 (`cargo xtask gpu-bundle --gpu-only --base main`)
#   bin/denseffn-r    = descriptors, a chunk in flight, grouped grid walk, 16-byte permuted GEMV loads
#   bin/denseffn-p    = + single-projection BF16 GEMMs on two row blocks a block (branch pfix: 4e57015 + the stack fix)
#   bin/denseffn      = + clusters of two blocks sharing each tile read (multicast), the stack fix, no amax pass in bf16_gemv; tests are this one's
# carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
# A hang in the cluster pipeline would eat the call: a short small-shape check first.
DENSEFFN_GPU_TEST_SMALL=1 DENSEFFN_GPU_TEST_OVERLAYS=bf16 timeout 40 "$here/bin/test-gpu" --test-threads=1 overlays_match prefill_split_k > "$out/t-bf16-small.log" 2>&1; rc=$?; echo "bf16 small rc=$rc"
grep -E "test result|panicked|FAILED" "$out/t-bf16-small.log" | cut -c1-200 | head -6
newok=0; [ $rc = 0 ] && newok=1
if [ $newok = 1 ]; then
  DENSEFFN_GPU_TEST_OVERLAYS=bf16 timeout 100 "$here/bin/test-gpu" --test-threads=1 overlays_match prefill_split_k > "$out/t-bf16-full.log" 2>&1; echo "bf16 full rc=$?"
  grep -E "test result|panicked|FAILED" "$out/t-bf16-full.log" | cut -c1-200 | head -6
fi
pack
A="bench --backend cuda --shapes 8b,70b --formats bf16 --m 1,8 --n 128,512,4096"
bins="base p r"; [ $newok = 1 ] && bins="base new p r"
for b in $bins; do
  bin="$here/bin/denseffn-$b"; [ "$b" = new ] && bin="$here/bin/denseffn"
  timeout 60 "$bin" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; pack
done
rm -f "$out"/*/*.svg
for b in r p new; do [ -d "$out/$b" ] && "$here/bin/denseffn" compare "$out/base" "$out/$b" --out "$out/ab-$b.md" >/dev/null; done
rm -f "$out"/*/bench.json
for b in $bins; do echo "== $b"; grep -E "\| bf16 \| (forward|forward_prefill)" "$out/$b/bench.md" | cut -d'|' -f2,4,7-11 | head -10; done
pack
if [ $newok = 1 ]; then
B="$here/bin/denseffn bench --backend cuda --shapes 8b --formats bf16 --m 1 --n 4096 --quick --out /tmp/b"
for b in new r; do
  B2="$B"; [ $b = r ] && B2="${B/bin\/denseffn /bin/denseffn-r }"
  timeout 80 ncu --clock-control none -k regex:'bf16_gemm' -c 2 --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy $B2 > "$out/ncu-$b.txt" 2>&1; echo "ncu $b rc=$?"
  grep -E "bf16_gemm|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Registers" "$out/ncu-$b.txt" | cut -c1-120 | head -14
  pack
done
fi
pack
