#!/usr/bin/env bash
# 2026-12-07 s24 (ninth session, ≤ 520 s; what s22 + s23b must leave out when one call is all
# the budget allows). Bundle as s23b's (both patches, main as `-base`), plus s24.sh.
# (1) the FP8 split: its GPU tests, FP8 and FP8 × FP8 prefill with the split on / off, 8B and
# 70B, N = 512 / 4096, cuBLAS in each process, memcheck of its test; (2) the decode prefetch:
# decode / verify / chained tests (small shapes, every overlay) at DENSEFFN_GEMV_PREFETCH=255,
# then decode 8B, BF16 / NVFP4 / Q4_K, m = 1 and 8, prefetch 0 / 4 and main's binary.
. "$(dirname "$0")/lib.sh"
t split 90 "$here/bin/test-gpu" --test-threads=1 --nocapture fp8_prefill_split_k prefill_gate_up_tail_split
for f in w8a8 fp8; do
  for s in 1 0; do
    [ $SECONDS -gt 280 ] && break
    s0=$SECONDS; fmt=fp8; name=$f-split$s
    env DENSEFFN_GEMM_TAIL_SPLIT=$s $([ $f = w8a8 ] && echo DENSEFFN_FFN_W8A8=1) timeout 50 "$here/bin/denseffn" bench --backend cuda --shapes 8b,70b --formats $fmt --m 1 --n 512,4096 --out "$out/$name" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s0))s"
    rm -f "$out"/$name/*.svg; grep -E "prefill" "$out/$name/bench.md" | cut -d'|' -f2,4,5,6,7,8,9
  done
done
[ $SECONDS -lt 300 ] && { t memcheck 50 compute-sanitizer --tool memcheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 fp8_prefill_split_k; grep -E "ERROR SUMMARY" "$out/memcheck.log" | tail -1; }
DENSEFFN_GEMV_PREFETCH=255 DENSEFFN_GPU_TEST_SMALL=1 t pftests 70 "$here/bin/test-gpu" --test-threads=1 decode_matches verify_paths chained_paths overlays_match
for run in 0 4 base; do
  [ $SECONDS -gt 400 ] && break
  s0=$SECONDS; bin="$here/bin/denseffn"; [ $run = base ] && bin="$here/bin/denseffn-base"
  name=pf$run-$SECONDS
  env DENSEFFN_GEMV_PREFETCH=$([ $run = base ] && echo 0 || echo $run) timeout 60 "$bin" bench --backend cuda --shapes 8b --formats bf16,nvfp4,q4k --m 1,8 --n 1 --out "$out/$name" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s0))s"
  rm -f "$out"/$name/*.svg; grep -E "\\| forward \\||forward_km\\(8\\)" "$out/$name/bench.md" | cut -d"|" -f2,3,4,7,8,10,13
done
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
