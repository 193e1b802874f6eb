#!/usr/bin/env bash
# 2026-12-05 (session 4): main after merging bf16-land + eager kernel lookup (0bc21a6 and docs after).
#   bin/denseffn, bin/test-gpu, bin/test-gpu_lora = main (`cargo xtask gpu-bundle --gpu-only --base 59fee82`)
#   bin/denseffn-base = 59fee82 (main before this session)
# carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev \( -name 'libcublas.so.1[0-9]*' -o -name 'libnccl.so.2*' \) -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | grep libcublas | head -1)"):${LD_LIBRARY_PATH:-}"
nccl="$(echo "$libs" | grep libnccl | head -n 1)"
[ -n "$nccl" ] && mkdir -p /tmp/nccl && ln -sf "$nccl" /tmp/nccl/libnccl.so && export LD_LIBRARY_PATH="/tmp/nccl:$LD_LIBRARY_PATH"
export NCCL_NVLS_ENABLE=0
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"; cat "$out/gpu.txt"
timeout 240 "$here/bin/test-gpu" --test-threads=1 > "$out/t-suite.log" 2>&1; echo "suite rc=$?"
grep -E "test result|panicked|FAILED" "$out/t-suite.log" | cut -c1-200 | head -8
pack
timeout 120 "$here/bin/test-gpu_lora" --test-threads=1 > "$out/t-lora.log" 2>&1; echo "lora rc=$?"
grep -E "test result|panicked|FAILED" "$out/t-lora.log" | cut -c1-200 | head -4
pack
A="bench --backend cuda --shapes 8b,70b --formats bf16 --m 1,8 --n 128,512,4096"
for b in base main; do
  bin="$here/bin/denseffn-$b"; [ "$b" = main ] && bin="$here/bin/denseffn"
  timeout 60 "$bin" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; pack
done
rm -f "$out"/*/*.svg "$out"/*/bench.json
"$here/bin/denseffn" compare "$out/base" "$out/main" --out "$out/ab.md" >/dev/null 2>&1
for b in base main; do echo "== $b"; grep -E "forward_prefill|\| forward \|" "$out/$b/bench.md" | cut -d'|' -f2,4,7-11 | head -10; done
pack
# BF16 paths under racecheck and synccheck on small shapes (the GEMV lost its amax pass and barrier).
for tool in racecheck synccheck; do
  DENSEFFN_GPU_TEST_SMALL=1 DENSEFFN_GPU_TEST_OVERLAYS=bf16 timeout 90 compute-sanitizer --tool $tool --error-exitcode 1 \
    "$here/bin/test-gpu" --test-threads=1 overlays_match prefill_split_k > "$out/san-$tool.log" 2>&1; echo "$tool rc=$?"
  tail -n 3 "$out/san-$tool.log"
  pack
done
