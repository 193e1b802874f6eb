#!/usr/bin/env bash
# Profiles for the next design steps, in one device call after km.sh (same bundle, carry gpu-bundle):
#   bash gpu-bundle/ncu.sh
# 1. km(8) with packed staging (8B NVFP4): the three batch8 launches and the packer — do the B
#    loads from global hit L1 (l1tex hit rate, long-scoreboard stalls vs the staged figures in
#    docs/perf/2026-12-03-km-analysis.md)?
# 2. The prefill GEMMs at N = 512 (8B NVFP4): where run 2 of docs/perf/2026-12-02-prefill-h200.md
#    (RT = 2) stands now — shared-memory pipe, issue slots, stall reasons — for issue 4's redesign.
here="$(cd "$(dirname "$0")" && pwd)"; out="$OUT"; D="$here/bin/denseffn"
pack() { (cd "$out" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz all.tgz); }
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section InstructionStats"
M="--metrics gpu__time_duration.sum,smsp__inst_executed.sum,l1tex__t_sector_hit_rate.pct,smsp__sass_inst_executed_op_{shared_ld,shared_st,global_ld}.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum,dram__bytes_read.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
B="bench --backend cuda --shapes 8b --formats nvfp4 --quick"
timeout 150 ncu -k regex:'batch8|mul_pack' -c 4 $S $D $B --m 8 --n 128 > "$out/km8-8b-sections.txt" 2>&1; echo "km sections rc=$?"
timeout 150 ncu -k regex:'batch8|mul_pack' -c 4 $M $D $B --m 8 --n 128 > "$out/km8-8b-metrics.txt" 2>&1; echo "km metrics rc=$?"
pack
timeout 150 ncu -k regex:'gemm_nvfp4_t' -c 2 $S $D $B --m 1 --n 512 > "$out/prefill-8b-n512-sections.txt" 2>&1; echo "prefill sections rc=$?"
timeout 150 ncu -k regex:'gemm_nvfp4_t' -c 2 $M $D $B --m 1 --n 512 > "$out/prefill-8b-n512-metrics.txt" 2>&1; echo "prefill metrics rc=$?"
pack
grep -E "Duration|Registers Per|Achieved Occupancy|L1/TEX Hit|Issue Slots Busy|Compute \(SM\) Throughput|Memory Throughput" "$out"/*sections.txt | head -60
