#!/usr/bin/env bash
# 2026-12-04: Nsight Compute of the wgmma prefill GEMMs (main 941d12c kernels = bin/denseffn-base of the pf7 bundle), 8B NVFP4, N = 4096. carry: gpu-bundle
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"
lib="$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -path '/proc/*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
B="$here/bin/denseffn-base bench --backend cuda --shapes 8b --formats nvfp4 --m 1 --n 4096 --quick --out /tmp/b"
timeout 150 ncu --clock-control none -k regex:'gemm_nvfp4_t_(gate_up_act|down)' -c 2 --section SpeedOfLight --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats $B > "$out/ncu-sections.txt" 2>&1; echo "sections rc=$?"
timeout 120 ncu --clock-control none -k regex:'gemm_nvfp4_t_(gate_up_act|down)' -c 2 --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,dram__bytes_read.sum,lts__t_bytes.sum,'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' $B > "$out/ncu-metrics.txt" 2>&1; echo "metrics rc=$?"
grep -E "gemm_nvfp4|Duration|Throughput|Issue Slots|Eligible|Active Warps|No Eligible|Registers|Achieved Occ|Shared Memory Config|stalled_(long|wait|barrier|math|mio|short|not_sel|dispatch|lg|tex|branch|sleep|membar|drain|imc|misc|no_inst|selected)|gmma|issue_active|bank_conflicts|wavefronts|dram__bytes|lts__t_bytes|inst_executed.sum" "$out/ncu-sections.txt" "$out/ncu-metrics.txt" | cut -c1-160 | head -120
