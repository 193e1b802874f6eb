#!/usr/bin/env bash
# 2026-12-06c s1: the BF16 GEMM with tokens as wgmma's A and 256 weight rows as one m64n256k16 B
# (branch bf16-swap, bin/denseffn, test-gpu) against main (bin/denseffn-base): correctness, A/B,
# then the same for branch bf16-bk32 (32-column chunks, 8 stages, on top of bf16-swap:
# bin/denseffn-bk32, test-gpu-bk32), then ncu of the GEMMs (8B, N = 4096).
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | head -1)"):${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "test result|panicked|worst|FAILED" "$out/$name.log" | cut -c1-220 | tail -8; }
ok=1
DENSEFFN_GPU_TEST_OVERLAYS=bf16 DENSEFFN_GPU_TEST_SMALL=1 t small 40 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match
grep -q "test result: ok" "$out/small.log" || ok=0
if [ $ok = 1 ]; then
  DENSEFFN_GPU_TEST_OVERLAYS=bf16 t full 100 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k
  s=$SECONDS; OUT="$out/ab" timeout 150 bash "$here/run.sh" ab --shapes 8b,70b --formats bf16 --m 1 --n 128,512,4096 --quick > "$out/ab.log" 2>&1; echo "== ab rc=$? $((SECONDS-s))s"
  cp "$out/ab/ab.md" "$out/ab.md"; cp "$out/ab/ab-new/bench.md" "$out/bench-new.md"; cp "$out/ab/ab-base/bench.md" "$out/bench-base.md"; cp "$out/ab/ab-new/bench.json" "$out/bench-new.json"; rm -rf "$out/ab"
  grep -E "prefill" "$out/ab.md"; grep -E "prefill" "$out/bench-new.md" | head
fi
DENSEFFN_GPU_TEST_OVERLAYS=bf16 DENSEFFN_GPU_TEST_SMALL=1 t small-bk32 40 "$here/bin/test-gpu-bk32" --test-threads=1 --nocapture overlays_match
if grep -q "test result: ok" "$out/small-bk32.log"; then
  DENSEFFN_GPU_TEST_OVERLAYS=bf16 t full-bk32 70 "$here/bin/test-gpu-bk32" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k
  s=$SECONDS; timeout 80 "$here/bin/denseffn-bk32" bench --backend cuda --shapes 8b,70b --formats bf16 --m 1 --n 128,512,4096 --quick --out "$out/bk32" > "$out/bk32.log" 2>&1; echo "== bench-bk32 rc=$? $((SECONDS-s))s"
  cp "$out/bk32/bench.md" "$out/bench-bk32.md"; "$here/bin/denseffn" compare "$out/bench-new.json" "$out/bk32/bench.json" --out "$out/cmp-bk32-vs-swap.md" > /dev/null 2>&1; rm -rf "$out/bk32"
  grep -E "prefill" "$out/cmp-bk32-vs-swap.md"
fi
sec="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy"
for b in denseffn-base denseffn; do
  [ $ok = 0 ] && [ $b = denseffn ] && continue
  s=$SECONDS
  timeout 45 ncu $sec -k 'regex:^bf16_gemm' --launch-count 2 "$here/bin/$b" bench --backend cuda --quick --shapes 8b --formats bf16 --m 1 --n 4096 --out /tmp/r-$b > "$out/ncu-$b.txt" 2>&1
  echo "== ncu $b rc=$? $((SECONDS-s))s"
  grep -E "^  [a-zA-Z_0-9]+.*\(|Duration|Throughput|Pipe|Busy|Eligible|Issued Warp|Bank|Hit Rate|Achieved Occ" "$out/ncu-$b.txt" | head -44
done
