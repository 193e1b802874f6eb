#!/usr/bin/env bash
# 2026-12-04 (evening): regression of main 245fe31 (GemmParams grew x_scales; grouped w8a8 order): GPU tests of every
# prefill arm, overlays, LoRA, MMQ arms, entry points, w8a8. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
T="$here/bin/test-gpu"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
timeout 60 "$T" --test-threads=1 --nocapture prefill > "$out/t-gpu-prefill.log" 2>&1; echo "test-gpu prefill rc=$?"; grep -E "test result|FAILED|panicked|worst" "$out/t-gpu-prefill.log" | cut -c1-200 | head
DENSEFFN_GPU_TEST_SMALL=1 timeout 60 "$T" --test-threads=1 --nocapture overlays_match > "$out/t-gpu-overlays-small.log" 2>&1; echo "test-gpu overlays (small) rc=$?"; grep -E "test result|FAILED|panicked" "$out/t-gpu-overlays-small.log" | head
DENSEFFN_GPU_TEST_SMALL=1 timeout 90 "$T" --test-threads=1 --nocapture mmq_matches every_kernel non_finite w8a8 decode_matches verify_paths_match > "$out/t-gpu-misc.log" 2>&1; echo "test-gpu mmq/entry points/non-finite/w8a8/decode/verify (small) rc=$?"; grep -E "^test |test result|FAILED|panicked" "$out/t-gpu-misc.log" | cut -c1-160 | head -12
pack
DENSEFFN_GPU_TEST_SMALL=1 timeout 120 "$here/bin/test-gpu_lora" --test-threads=1 --nocapture > "$out/t-gpu_lora.log" 2>&1; echo "test-gpu_lora (small) rc=$?"; grep -E "^test |test result|FAILED|panicked" "$out/t-gpu_lora.log" | cut -c1-160 | head -10
pack
