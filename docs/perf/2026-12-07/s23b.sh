#!/usr/bin/env bash
# 2026-12-07 s23b (≤ 560 s; best on the H200): the decode GEMVs' L2 prefetch past the register
# pipeline (`gemv-prefetch.patch`: a GEMV launched as its input producer's dependent, i.e. down
# after gate+up and the km chains, asks L2 for its next DENSEFFN_GEMV_PREFETCH chunks a warp
# before `griddepcontrol.wait`; default 0 = off). Bundle (both patches, main as the base):
#   git apply docs/perf/2026-12-07/fp8-splitk.patch docs/perf/2026-12-07/gemv-prefetch.patch
#   cargo xtask gpu-bundle --gpu-only --base HEAD; rm gpu-bundle/bin/test-gpu_lora*
#   cp docs/perf/2026-12-07/{s22.sh,s23b.sh,lib.sh} gpu-bundle/
# (1) decode / verify / chained tests with the prefetch on (255: the whole split) against the
# CPU reference, small shapes on every overlay, then model shapes; memcheck of the small ones;
# (2) decode A/B, one binary: DENSEFFN_GEMV_PREFETCH = 0, 2, 4, 8, then main's binary (`-base`,
# whose single GEMVs lack the prefetch code), 8B / 70B, every format, m = 1 and 8; then 0 and 4
# again, as time allows.
. "$(dirname "$0")/lib.sh"
export DENSEFFN_GEMV_PREFETCH=255
DENSEFFN_GPU_TEST_SMALL=1 t small 120 "$here/bin/test-gpu" --test-threads=1 decode_matches verify_paths chained_paths overlays_match
t model 90 "$here/bin/test-gpu" --test-threads=1 --nocapture decode_matches
grep -E "rel L2|worst" "$out/model.log" | head -12
DENSEFFN_GPU_TEST_SMALL=1 t memcheck 100 compute-sanitizer --tool memcheck --error-exitcode 1 "$here/bin/test-gpu" --test-threads=1 decode_matches verify_paths
grep -E "ERROR SUMMARY" "$out/memcheck.log" | tail -1
unset DENSEFFN_GEMV_PREFETCH
i=0
for run in 0 2 4 8 base 0 4; do
  i=$((i+1))
  [ $SECONDS -gt 470 ] && break
  s0=$SECONDS; bin="$here/bin/denseffn"; [ $run = base ] && bin="$here/bin/denseffn-base"
  name=pf$run-$i
  env DENSEFFN_GEMV_PREFETCH=$([ $run = base ] && echo 0 || echo $run) timeout 80 "$bin" bench --backend cuda --shapes 8b,70b --formats bf16,nvfp4,fp8,q4k,q2_0 --m 1,8 --n 1 --out "$out/$name" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s0))s"
  rm -f "$out"/$name/*.svg; grep -E "\\| forward \\||forward_km\\(8\\)" "$out/$name/bench.md" | cut -d"|" -f2,3,4,7,8,10,13
done
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
