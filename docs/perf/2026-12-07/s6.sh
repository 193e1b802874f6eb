#!/usr/bin/env bash
# 2026-12-07 s6: s5 cut to ~300 s for a short device budget: pt (persistent + TMA activations)
# small then full BF16 tests; `denseffn bench` main and pt (bf16, 8B and 70B, N 512/4096).
# `bash s6.sh --quick`: quick benches (~240 s in all), for the last device seconds.
. "$(dirname "$0")/lib.sh"
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
DENSEFFN_GPU_TEST_SMALL=1 t small-pt 40 "$here/bin/test-gpu-pt" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail
grep -q "test result: ok" "$out/small-pt.log" && t full-pt 130 "$here/bin/test-gpu-pt" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k every_kernel prefill_matches
b "" 70 ${1:-} --shapes 8b,70b --n 512,4096
b -pt 70 ${1:-} --shapes 8b,70b --n 512,4096
"$here/bin/denseffn" compare "$out/bench.json" "$out/bench-pt.json" --out "$out/cmp-pt.md" > /dev/null 2>&1; grep -E "prefill" "$out/cmp-pt.md" | head -8
