#!/usr/bin/env bash
# 2026-12-07 s19 (≤ 250 s): the FP8 × FP8 consumer with one `wgmma.fence` a stage (its 8
# `QGMMA`s back to back; was a fence a step), as `w8a16_gemm*` got in ca8c69d. Bundle of the
# working tree with `--base HEAD` (ca8c69d). (1) w8a8 test (small) and racecheck; (2) w8a8
# prefill A/B, base → this, twice; (3) the FP8 overlay (default W8A16 arm, the same kernels in
# both builds) on every path at full shapes.
. "$(dirname "$0")/lib.sh"
DENSEFFN_GPU_TEST_SMALL=1 t w8a8 60 "$here/bin/test-gpu" --test-threads=1 --nocapture w8a8
DENSEFFN_GPU_TEST_SMALL=1 t racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 w8a8
grep -E "RACECHECK SUMMARY" "$out/racecheck.log" | tail -1
for v in -base "" -base ""; do
  s0=$SECONDS; DENSEFFN_FFN_W8A8=1 timeout 40 "$here/bin/denseffn$v" bench --backend cuda --shapes 8b,70b --formats fp8 --m 1 --n 512,4096 --out "$out/w8a8$v" > "$out/w8a8$v.log" 2>&1; echo "== w8a8$v rc=$? $((SECONDS-s0))s"
  rm -f "$out"/w8a8$v/*.svg; grep -E "prefill" "$out/w8a8$v/bench.md" | cut -d'|' -f2,4,5,6,7,8,9
done
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/r1.tgz"
DENSEFFN_GPU_TEST_OVERLAYS=fp8 t fp8-full 150 "$here/bin/test-gpu" --test-threads=1 --nocapture overlays_match every_kernel
gzip "$out/fp8-full.log"
