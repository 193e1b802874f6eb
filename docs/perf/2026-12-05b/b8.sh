#!/usr/bin/env bash
# 2026-12-05 (session 4): the warp-specialized BF16 prefill GEMM (branch bf16-ws) against
# bf16-land (7c49d91: descriptors, grouped walk, 16-byte GEMV loads, no amax pass) and main.
#   bin/denseffn-base = main 59fee82 (`cargo xtask gpu-bundle --gpu-only --base main`)
#   bin/denseffn-land, bin/test-gpu-land = bf16-land 7c49d91
#   bin/denseffn, bin/test-gpu, bin/test-gpu_lora = bf16-ws (`cargo xtask gpu-bundle --gpu-only`)
# carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
libs="$(find / -xdev \( -name 'libcublas.so.1[0-9]*' -o -name 'libnccl.so.2*' \) -not -path '/proc/*' 2>/dev/null)"
export LD_LIBRARY_PATH="$(dirname "$(echo "$libs" | grep libcublas | head -1)"):${LD_LIBRARY_PATH:-}"
nccl="$(echo "$libs" | grep libnccl | head -n 1)"
[ -n "$nccl" ] && mkdir -p /tmp/nccl && ln -sf "$nccl" /tmp/nccl/libnccl.so && export LD_LIBRARY_PATH="/tmp/nccl:$LD_LIBRARY_PATH"
export NCCL_NVLS_ENABLE=0
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"; cat "$out/gpu.txt"
# A hang in the mbarrier pipeline would eat the call: a short small-shape check first.
DENSEFFN_GPU_TEST_SMALL=1 DENSEFFN_GPU_TEST_OVERLAYS=bf16 timeout 40 "$here/bin/test-gpu" --test-threads=1 overlays_match prefill_split_k > "$out/t-ws-small.log" 2>&1; rc=$?; echo "ws small rc=$rc"
grep -E "test result|panicked|FAILED" "$out/t-ws-small.log" | cut -c1-200 | head -6
wsok=0; [ $rc = 0 ] && wsok=1
if [ $wsok = 1 ]; then
  DENSEFFN_GPU_TEST_OVERLAYS=bf16 timeout 100 "$here/bin/test-gpu" --test-threads=1 overlays_match prefill_split_k > "$out/t-ws-full.log" 2>&1; r2=$?; echo "ws full rc=$r2"
  grep -E "test result|panicked|FAILED" "$out/t-ws-full.log" | cut -c1-200 | head -6
  [ $r2 = 0 ] || wsok=0
fi
pack
A="bench --backend cuda --shapes 8b,70b --formats bf16 --m 1,8 --n 128,512,4096"
bins="base land"; [ $wsok = 1 ] && bins="base land ws"
for b in $bins; do
  bin="$here/bin/denseffn-$b"; [ "$b" = ws ] && bin="$here/bin/denseffn"
  timeout 60 "$bin" $A --out "$out/$b" > "$out/$b.log" 2>&1; echo "$b rc=$?"; pack
done
rm -f "$out"/*/*.svg "$out"/*/bench.json
for b in land ws; do [ -d "$out/$b" ] && "$here/bin/denseffn" compare "$out/base" "$out/$b" --out "$out/ab-$b.md" >/dev/null 2>&1; done
for b in $bins; do echo "== $b"; grep -E "\| bf16 \| (forward|forward_prefill)" "$out/$b/bench.md" | cut -d'|' -f2,4,7-11 | head -10; done
pack
# The whole GPU suite of the build to land (ws if it passed, else land).
t="$here/bin/test-gpu"; [ $wsok = 1 ] || t="$here/bin/test-gpu-land"
timeout 200 "$t" --test-threads=1 > "$out/t-suite.log" 2>&1; echo "suite $(basename $t) rc=$?"
grep -E "test result|panicked|FAILED" "$out/t-suite.log" | cut -c1-200 | head -8
pack
timeout 100 "$here/bin/test-gpu_lora" --test-threads=1 > "$out/t-lora.log" 2>&1; echo "lora rc=$?"
grep -E "test result|panicked|FAILED" "$out/t-lora.log" | cut -c1-200 | head -4
pack
