#!/usr/bin/env bash
# 2026-12-07 s11 (one call, ≤ 590 s): the cluster-pair BF16 GEMMs (`bf16-pair.patch`, "x2")
# against main. Bundle (here): `cargo xtask gpu-bundle --gpu-only --variant
# x2=docs/perf/2026-12-07/bf16-pair.patch`, `rm gpu-bundle/bin/test-gpu_lora*` (carry limit),
# then lib.sh, stalls.py and this script beside bin/. Steps: (1) small BF16 overlay + tail
# tests of x2 (N = 130: one pair; a hang ends at 60 s); (2) if they pass: full shapes with
# split-K, every entry point (the `_x2` ones on N = 256) and sampled prefill; (3) `denseffn
# bench` main, x2, and x2 with DENSEFFN_GEMM_PAIR=0 (its plain forms: the control), bf16 8B
# and 70B at N 512/4096, cuBLAS in each process; (4) racecheck and memcheck of the small
# tests; (5) ncu of x2's 8B N = 512 prefill. Everything but stdout lands in r.tgz.
. "$(dirname "$0")/lib.sh"
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
DENSEFFN_GPU_TEST_SMALL=1 t small-x2 60 "$here/bin/test-gpu-x2" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail
if grep -q "test result: ok" "$out/small-x2.log"; then
  t full-x2 170 "$here/bin/test-gpu-x2" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k every_kernel prefill_matches
  b "" 60 --shapes 8b,70b --n 512,4096
  b -x2 60 --shapes 8b,70b --n 512,4096
  "$here/bin/denseffn" compare "$out/bench.json" "$out/bench-x2.json" --out "$out/cmp-x2.md" > /dev/null 2>&1; grep -E "prefill" "$out/cmp-x2.md" | head -8
  s=$SECONDS; DENSEFFN_GEMM_PAIR=0 timeout 60 "$here/bin/denseffn-x2" bench --backend cuda --formats bf16 --m 1 --shapes 8b,70b --n 512,4096 --out "$out/boff" > "$out/bench-off.log" 2>&1; echo "== bench-off rc=$? $((SECONDS-s))s"
  cp "$out/boff/bench.json" "$out/bench-off.json"; rm -rf "$out/boff"
  "$here/bin/denseffn" compare "$out/bench-off.json" "$out/bench-x2.json" --out "$out/cmp-off-x2.md" > /dev/null 2>&1; grep -E "prefill" "$out/cmp-off-x2.md" | head -8
  for tool in racecheck memcheck; do
    DENSEFFN_GPU_TEST_SMALL=1 t $tool 50 compute-sanitizer --tool $tool --error-exitcode 1 "$here/bin/test-gpu-x2" --test-threads=1 overlays_match prefill_gate_up_tail prefill_split_k
    grep -E "SUMMARY" "$out/$tool.log"
  done
  s=$SECONDS; timeout 60 ncu --section SpeedOfLight --section LaunchStats -k 'regex:^bf16_gemm' --launch-count 2 "$here/bin/denseffn-x2" bench --backend cuda --shapes 8b --formats bf16 --m 1 --n 512 --quick --out /tmp/r > "$out/ncu.txt" 2>&1; echo "== ncu rc=$? $((SECONDS-s))s"
  grep -E "bf16_gemm|Duration|Compute \(SM\)|L2 Cache Th|Grid Size|Cluster" "$out/ncu.txt" | head -20
fi
tar czf /tmp/r.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/r.tgz "$out/"
