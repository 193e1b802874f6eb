#!/usr/bin/env bash
# 2026-12-07 s9 (≤ 560 s): the GPU tests of pt that s8 did not finish or whose log it lost:
# every test of test-gpu but the prefill / every-kernel ones s8 passed, then the LoRA binary.
# Per-test results to stdout; the logs in r.tgz.
. "$(dirname "$0")/lib.sh"
r() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$out/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS-s))s"; grep -E "^test .* \.\.\. |panicked|test result" "$out/$name.log" | grep -vE "^test .*worst" | cut -c1-160; }
r lora-pt 150 "$here/bin/test-gpu_lora-pt" --test-threads=1
r rest-pt $((540 - SECONDS)) "$here/bin/test-gpu-pt" --test-threads=1 --skip prefill_gate_up_tail --skip prefill_split_k --skip every_kernel --skip prefill_matches
tar czf /tmp/r.tgz -C "$out" . && rm -f "$out"/*.log && mv /tmp/r.tgz "$out/"
