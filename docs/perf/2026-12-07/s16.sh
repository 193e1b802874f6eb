#!/usr/bin/env bash
# 2026-12-07 s16 (≤ 440 s; not yet run): the FP8 overlay's default prefill arm (`w8a16_gemm`)
# on the persistent kernel of the FP8 × FP8 arm (`w8a16-bulk.patch`: f16 activations with a
# power-of-two scale per token, the FP8 tiles turned into f16 times their block scale in
# registers, `wgmma…m64n128k16.f16`, one stage's products in flight; 4 launches). Bundle, from
# main with the patch beside it uncommitted:
#   cargo xtask gpu-bundle --gpu-only --variant a16=docs/perf/2026-12-07/w8a16-bulk.patch
# then lib.sh and this script beside bin/ (`rm bin/test-gpu_lora*` to keep the carry small).
# (1) the variant's FP8 overlay on every path (full shapes: 4096×14336 and 4160×14400, N up to
# 4096, SiLU and GELU) and every entry point; (2) FP8 prefill, main then the variant, cuBLAS
# bf16 in each process; (3) racecheck and memcheck of the variant's FP8 overlay test (small).
. "$(dirname "$0")/lib.sh"
# (0) main's FP8 × FP8 kernels as they are since 9cc2b3e (21270be's plus PDL), small shapes:
# that exact build has not run yet.
DENSEFFN_GPU_TEST_SMALL=1 t w8a8-main 60 "$here/bin/test-gpu" --test-threads=1 --nocapture w8a8
DENSEFFN_GPU_TEST_OVERLAYS=fp8 t a16-tests 180 "$here/bin/test-gpu-a16" --test-threads=1 --nocapture overlays_match every_kernel
for s in "" -a16; do
  s0=$SECONDS; timeout 60 "$here/bin/denseffn$s" bench --backend cuda --shapes 8b,70b --formats fp8 --m 1 --n 512,4096 --out "$out/fp8$s" > "$out/fp8$s.log" 2>&1; echo "== fp8$s rc=$? $((SECONDS-s0))s"
  grep -E "prefill" "$out/fp8$s/bench.md" | cut -d'|' -f2,3,4,6,7,8,9,10
done
export DENSEFFN_GPU_TEST_SMALL=1 DENSEFFN_GPU_TEST_OVERLAYS=fp8
t racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 1 "$here/bin/test-gpu-a16" --test-threads=1 overlays_match
t memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 1 "$here/bin/test-gpu-a16" --test-threads=1 overlays_match
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/racecheck.log" "$out/memcheck.log" | tail -3
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
