#!/usr/bin/env bash
# 2026-12-07 s21 (eighth session, ≤ 240 s): the FP8 GEMMs' K split (`w8a16_gemm*_splitk*`,
# `w8a8_gemm*_splitk*`: the last partial wave of gate+up tiles split over K, as BF16's). Bundle:
#   git apply docs/perf/2026-12-07/fp8-splitk.patch   # (the change; main has it as a patch only)
#   cargo xtask gpu-bundle --gpu-only; rm gpu-bundle/bin/test-gpu_lora*; cp s21.sh lib.sh gpu-bundle/
# (1) the split tests on the GPU (FP8 both arms, and BF16's unchanged one) and memcheck of the FP8
# one; (2) prefill, split on and off (DENSEFFN_GEMM_TAIL_SPLIT=0: the kernels before this change,
# byte-identical SASS), FP8 default and FP8 × FP8, 8B / 70B, N = 512 / 4096, cuBLAS bf16 in
# each process, as long as the time allows.
. "$(dirname "$0")/lib.sh"
t split 90 "$here/bin/test-gpu" --test-threads=1 --nocapture fp8_prefill_split_k prefill_gate_up_tail_split
grep -E "rel L2 vs CPU" "$out/split.log" | head -30
for r in 1 2; do
  for f in w8a8 fp8; do
    for s in 1 0; do
      [ $SECONDS -gt 170 ] && break
      s0=$SECONDS; fmt=$f; [ $f = w8a8 ] && fmt=fp8; name=$f-split$s-$r
      env DENSEFFN_GEMM_TAIL_SPLIT=$s $([ $f = w8a8 ] && echo DENSEFFN_FFN_W8A8=1) timeout 45 "$here/bin/denseffn" bench --backend cuda --shapes 8b,70b --formats $fmt --m 1 --n 512,4096 --out "$out/$name" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s0))s"
      rm -f "$out"/$name/*.svg; grep -E "prefill" "$out/$name/bench.md" | cut -d'|' -f2,4,5,6,7,8,9
    done
  done
  break
done
[ $SECONDS -lt 180 ] && { t memcheck 50 compute-sanitizer --tool memcheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 fp8_prefill_split_k; grep -E "ERROR SUMMARY" "$out/memcheck.log" | tail -1; }
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
