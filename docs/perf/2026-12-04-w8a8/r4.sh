#!/usr/bin/env bash
# 2026-12-04 (evening): main's w8a8 kernels (95bcb17 = b3e5733's PTX): Nsight Compute of both FP8 x FP8 GEMMs
# (8B, N = 4096), then the criterion prefill bench (bin/bench-prefill) with the FP8 arms. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
B="$here/bin/denseffn bench --backend cuda --shapes 8b --formats fp8_w8a8 --m 1 --n 4096 --quick --out /tmp/b"
timeout 150 ncu --clock-control none -k regex:'w8a8_gemm' -c 2 --section SpeedOfLight --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats $B > "$out/ncu-sections.txt" 2>&1; echo "sections rc=$?"
timeout 120 ncu --clock-control none -k regex:'w8a8_gemm' -c 2 --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,dram__bytes_read.sum,lts__t_bytes.sum,'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' $B > "$out/ncu-metrics.txt" 2>&1; echo "metrics rc=$?"
grep -E "w8a8_gemm|Duration|Throughput|Issue Slots|Eligible|Active Warps|No Eligible|Registers|Achieved Occ|stalled_(long|wait|barrier|math|mio|short|not_sel|dispatch|lg|tex|branch|sleep|membar|drain|imc|misc|no_inst|selected)|gmma|issue_active|bank_conflicts|dram__bytes|lts__t_bytes|inst_executed.sum" "$out/ncu-sections.txt" "$out/ncu-metrics.txt" | cut -c1-160 | head -90
pack
[ -x "$here/bin/bench-prefill" ] && { DENSEFFN_BENCH_OUT="$out/bench-prefill.md" timeout 300 "$here/bin/bench-prefill" --bench > "$out/bench-prefill.log" 2>&1; echo "bench-prefill (criterion) rc=$?"; cat "$out/bench-prefill.md" | head -40; }
pack
