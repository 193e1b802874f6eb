#!/usr/bin/env bash
# 2026-12-07 s15 (≤ 440 s; correctness first, sanitizers last): the FP8 × FP8 gate+up GEMM's tail split (the last wave's units split
# over K, as BF16's) and the arm's launches chained by programmatic dependent launch. Bundle:
# `cargo xtask gpu-bundle --gpu-only --base 21270be` (base = the bulk w8a8 without either) of
# the working tree (f326063 + PDL), lib.sh and this script beside bin/. (1) w8a8 GPU test (full
# shapes: N = 511 and 4096 split on 132 SMs) and every entry point; racecheck and memcheck of
# the w8a8 test on small shapes; (2) w8a8 prefill: base, this, this with
# DENSEFFN_GEMM_TAIL_SPLIT=0, this with DENSEFFN_PDL=0; (3) BF16 (down now a dependent launch):
# overlay test on every path, prefill with and without PDL.
. "$(dirname "$0")/lib.sh"
t w8a8-tests 150 "$here/bin/test-gpu" --test-threads=1 --nocapture w8a8 every_kernel
# BF16's down GEMM is now the programmatic dependent of its gate+up: the BF16 overlay on every
# path (full shapes).
DENSEFFN_GPU_TEST_OVERLAYS=bf16 t bf16-tests 100 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match
export DENSEFFN_FFN_W8A8=1
for s in -base "" nosplit nopdl; do
  bin="$here/bin/denseffn${s/no*/}"; [ "$s" = nosplit ] && export DENSEFFN_GEMM_TAIL_SPLIT=0
  [ "$s" = nopdl ] && export DENSEFFN_PDL=0 && unset DENSEFFN_GEMM_TAIL_SPLIT
  s0=$SECONDS; timeout 60 "$bin" bench --backend cuda --shapes 8b,70b --formats fp8 --m 1 --n 512,4096 --out "$out/w8a8$s" > "$out/w8a8$s.log" 2>&1; echo "== w8a8$s rc=$? $((SECONDS-s0))s"
  grep -E "prefill" "$out/w8a8$s/bench.md" | cut -d'|' -f2,3,4,6,7,8,9,10
done
unset DENSEFFN_GEMM_TAIL_SPLIT DENSEFFN_PDL DENSEFFN_FFN_W8A8
for pdl in 1 0; do
  DENSEFFN_PDL=$pdl timeout 40 "$here/bin/denseffn" bench --backend cuda --formats bf16 --m 1 --shapes 8b,70b --n 512,4096 --out "$out/bf16-pdl$pdl" > "$out/bf16-pdl$pdl.log" 2>&1; echo "== bf16 pdl=$pdl rc=$?"
  grep -E "prefill" "$out/bf16-pdl$pdl/bench.md" | cut -d'|' -f2,3,4,6,7,8,9,10
done
export DENSEFFN_GPU_TEST_SMALL=1
t racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 w8a8
t memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 w8a8
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/racecheck.log" "$out/memcheck.log" | tail -3
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
