#!/usr/bin/env bash
# 2026-12-07 s14 (≤ 480 s): the FP8 × FP8 GEMMs on bulk_gemm's persistent, warp-specialized
# kernel (producer warpgroup, bulk-copied FP8 tiles, TMA activations, cluster pairs,
# setmaxnreg 40/232). Bundle: `cargo xtask gpu-bundle --gpu-only --base 6f94754`, lib.sh and
# this script beside bin/. (1) the w8a8 GPU test (full shapes, N 1/64/511/4096, odd K tiles)
# and every entry point; (2) A/B of w8a8 prefill, main (`denseffn-base`) then this; (3) the
# BF16 GEMMs (whose driver loop moved into a function) main then this; cuBLAS in each process.
. "$(dirname "$0")/lib.sh"
t w8a8-tests 200 "$here/bin/test-gpu" --test-threads=1 --nocapture w8a8 every_kernel
for s in -base ""; do
  s0=$SECONDS; DENSEFFN_FFN_W8A8=1 timeout 90 "$here/bin/denseffn$s" bench --backend cuda --shapes 8b,70b --formats fp8 --m 1 --n 512,4096 --out "$out/w8a8$s" > "$out/w8a8$s.log" 2>&1; echo "== w8a8$s rc=$? $((SECONDS-s0))s"
  grep -E "prefill" "$out/w8a8$s/bench.md" | cut -d'|' -f2,3,4,6,7,8,9,10
done
b -base 80 --shapes 8b,70b --n 512,4096
b "" 80 --shapes 8b,70b --n 512,4096
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
