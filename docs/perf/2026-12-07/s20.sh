#!/usr/bin/env bash
# 2026-12-07 s20 (prepared for the next session, ≤ 250 s; best on the H200): main's prefill
# arms in one process family on one card, and where the W8A16 gate+up GEMM stalls. Bundle:
#   cargo xtask gpu-bundle --gpu-only; rm gpu-bundle/bin/test-gpu_lora*; cp s20.sh lib.sh gpu-bundle/
# (1) FP8 (default W8A16), FP8 × FP8 (opt-in) and BF16 prefill at 8B / 70B, N = 512 / 4096,
# cuBLAS bf16 in each process; (2) ncu SourceCounters (stall samples by SASS location) and
# WarpStateStats of `w8a16_gemm_gate_up_act_x2` at 8B N = 4096.
. "$(dirname "$0")/lib.sh"
for f in fp8 w8a8 bf16; do
  s0=$SECONDS; fmt=$f; [ $f = w8a8 ] && fmt=fp8
  env $([ $f = w8a8 ] && echo DENSEFFN_FFN_W8A8=1) timeout 45 "$here/bin/denseffn" bench --backend cuda --shapes 8b,70b --formats $fmt --m 1 --n 512,4096 --out "$out/$f" > "$out/$f.log" 2>&1; echo "== $f rc=$? $((SECONDS-s0))s"
  rm -f "$out"/$f/*.svg; grep -E "prefill" "$out/$f/bench.md" | cut -d'|' -f2,4,5,6,7,8,9
done
timeout 90 ncu -k regex:w8a16_gemm_gate_up -c 1 --section SourceCounters --section WarpStateStats "$here/bin/denseffn" bench --backend cuda --shapes 8b --formats fp8 --m 1 --n 4096 --quick > "$out/ncu-src.txt" 2>&1; echo "== ncu rc=$?"
grep -A30 "Section: Source Counters" "$out/ncu-src.txt" | head -40
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
