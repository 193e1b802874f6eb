#!/usr/bin/env bash
# 2026-12-07 s8 (one call, ≤ 600 s): pt with the launch fix (the parameter block passed by
# pointer, so the driver puts it at the `.align 128` offset the kernel declares), against main
# and p: small then full BF16 tests of pt; `denseffn bench` (not --quick) main / p / pt, bf16
# 8B and 70B at N 512/4096, cuBLAS in each process; every other GPU test of pt (the launch path
# changed for every kernel); racecheck of the small BF16 tests. Everything but the summary goes
# into r.tgz (the device tool returns few files).
. "$(dirname "$0")/lib.sh"
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
DENSEFFN_GPU_TEST_SMALL=1 t small-pt 40 "$here/bin/test-gpu-pt" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail
if grep -q "test result: ok" "$out/small-pt.log"; then
  t full-pt 130 "$here/bin/test-gpu-pt" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k every_kernel prefill_matches
  b "" 70 --shapes 8b,70b --n 512,4096
  for v in p pt; do
    b -$v 70 --shapes 8b,70b --n 512,4096
    "$here/bin/denseffn" compare "$out/bench.json" "$out/bench-$v.json" --out "$out/cmp-$v.md" > /dev/null 2>&1; grep -E "prefill" "$out/cmp-$v.md" | head -8
  done
  unset DENSEFFN_GPU_TEST_OVERLAYS
  left=$((500 - SECONDS)); [ $left -gt 30 ] && t rest-pt $left "$here/bin/test-gpu-pt" --test-threads=1 --nocapture --skip prefill_gate_up_tail --skip prefill_split_k --skip every_kernel --skip prefill_matches
  left=$((560 - SECONDS)); [ $left -gt 20 ] && DENSEFFN_GPU_TEST_OVERLAYS=bf16 DENSEFFN_GPU_TEST_SMALL=1 t racecheck $left compute-sanitizer --tool racecheck "$here/bin/test-gpu-pt" --test-threads=1 overlays_match prefill_gate_up_tail prefill_split_k
fi
cd "$out" && tar czf r.tgz --exclude=r.tgz --exclude=gpu.txt . && find . -mindepth 1 -not -name r.tgz -not -name gpu.txt -delete
