#!/usr/bin/env bash
# 2026-12-07 s22 (ninth session, full budget, ≤ 560 s): s21 widened. The FP8 GEMMs' K split
# (`w8a16_gemm*_splitk*`, `w8a8_gemm*_splitk*`). Bundle:
#   git apply docs/perf/2026-12-07/fp8-splitk.patch   # (the change; main had it as a patch only)
#   cargo xtask gpu-bundle --gpu-only; rm gpu-bundle/bin/test-gpu_lora*; cp s22.sh lib.sh gpu-bundle/
# (1) the split tests on the GPU; (2) prefill, split on and off (DENSEFFN_GEMM_TAIL_SPLIT=0: the
# kernels before this change), FP8 default and FP8 × FP8, 8B / 70B, N = 512 / 4096, two rounds
# interleaved, cuBLAS bf16 in each process; BF16 once; (3) memcheck and racecheck of the split test.
. "$(dirname "$0")/lib.sh"
t split 90 "$here/bin/test-gpu" --test-threads=1 --nocapture fp8_prefill_split_k prefill_gate_up_tail_split
grep -E "rel L2 vs CPU|max" "$out/split.log" | head -30
for r in 1 2; do
  for f in w8a8 fp8; do
    for s in 1 0; do
      [ $SECONDS -gt 400 ] && break
      s0=$SECONDS; fmt=$f; [ $f = w8a8 ] && fmt=fp8; name=$f-split$s-$r
      env DENSEFFN_GEMM_TAIL_SPLIT=$s $([ $f = w8a8 ] && echo DENSEFFN_FFN_W8A8=1) timeout 50 "$here/bin/denseffn" bench --backend cuda --shapes 8b,70b --formats $fmt --m 1 --n 512,4096 --out "$out/$name" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s0))s"
      rm -f "$out"/$name/*.svg; grep -E "prefill" "$out/$name/bench.md" | cut -d'|' -f2,4,5,6,7,8,9
    done
  done
done
if [ $SECONDS -lt 420 ]; then
  s0=$SECONDS; timeout 50 "$here/bin/denseffn" bench --backend cuda --shapes 8b,70b --formats bf16 --m 1 --n 512,4096 --out "$out/bf16" > "$out/bf16.log" 2>&1; echo "== bf16 rc=$? $((SECONDS-s0))s"
  rm -f "$out"/bf16/*.svg; grep -E "prefill" "$out/bf16/bench.md" | cut -d'|' -f2,4,5,6,7,8,9
fi
[ $SECONDS -lt 470 ] && { t memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 fp8_prefill_split_k; grep -E "ERROR SUMMARY" "$out/memcheck.log" | tail -1; }
[ $SECONDS -lt 520 ] && { t racecheck 40 compute-sanitizer --tool racecheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 fp8_prefill_split_k; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/racecheck.log" | tail -2; }
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
