#!/usr/bin/env bash
# 2026-12-07 s12: the pair (bf16-pair.patch) with its remote empty-barrier arrival at CTA scope
# (`mbarrier.arrive.shared::cluster`): s11's `.release.cluster` form put MEMBAR.ALL.GPU + ERRBAR
# + CGAERRBAR in every consumer warp's every chunk (SASS), the suspect of s11's +55%.
. "$(dirname "$0")/lib.sh"
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
DENSEFFN_GPU_TEST_SMALL=1 t small-x2 60 "$here/bin/test-gpu-x2" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k
b "" 60 --shapes 8b,70b --n 512,4096
b -x2 60 --shapes 8b,70b --n 512,4096
"$here/bin/denseffn" compare "$out/bench.json" "$out/bench-x2.json" --out "$out/cmp-x2.md" > /dev/null 2>&1; grep -E "prefill" "$out/cmp-x2.md" | head -8
if grep -q "test result: ok" "$out/small-x2.log"; then
  t full-x2 170 "$here/bin/test-gpu-x2" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k every_kernel prefill_matches
  DENSEFFN_GPU_TEST_SMALL=1 t racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 1 "$here/bin/test-gpu-x2" --test-threads=1 overlays_match prefill_gate_up_tail prefill_split_k
  grep -E "SUMMARY" "$out/racecheck.log"
fi
timeout 60 ncu --section SpeedOfLight -k 'regex:^bf16_gemm' --launch-count 2 "$here/bin/denseffn-x2" bench --backend cuda --shapes 8b --formats bf16 --m 1 --n 512 --quick --out /tmp/r > "$out/ncu-x2.txt" 2>&1; echo "== ncu rc=$?"
grep -E "^  bf16_gemm|Duration|L2 Cache Th|Compute \(SM\)" "$out/ncu-x2.txt" | head -12
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
