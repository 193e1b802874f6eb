#!/usr/bin/env bash
# 2026-12-07 s4: s3 cut to the session's last ~300 device seconds: the persistent build's (p)
# correctness (small shapes, then full shapes with the tail-split, capped-grid and split-K tests),
# a quick A/B against main (bf16, 8B and 70B, N 512/4096, cuBLAS in each process), then the
# entry-point and sampled-prefill tests.
. "$(dirname "$0")/lib.sh"
export DENSEFFN_GPU_TEST_OVERLAYS=bf16
DENSEFFN_GPU_TEST_SMALL=1 t small-p 30 "$here/bin/test-gpu-p" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail
grep -q "test result: ok" "$out/small-p.log" || exit 0
t full-p 90 "$here/bin/test-gpu-p" --test-threads=1 --nocapture overlays_match prefill_gate_up_tail prefill_split_k
b "" 45 --quick --shapes 8b,70b --n 512,4096
b -p 45 --quick --shapes 8b,70b --n 512,4096
"$here/bin/denseffn" compare "$out/bench.json" "$out/bench-p.json" --out "$out/cmp-p.md" > /dev/null 2>&1; grep -E "prefill" "$out/cmp-p.md" | head -8
t rest-p 60 "$here/bin/test-gpu-p" --test-threads=1 --nocapture every_kernel prefill_matches
