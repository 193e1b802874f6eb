//! Launch planning for the GEMV family: how many K splits, and the grid.
use crate::backend::Launch;
use denseffn_device::formats::nvfp4::TILE_K;
use denseffn_device::params::{gemv_smem_bytes, GemvParams, ParamBlock, GEMV_ROWS_PER_BLOCK, GEMV_SMEM_HEADER, GEMV_THREADS};

/// Shared memory one GEMV block may take (so four blocks fit on an SM).
pub const GEMV_SMEM_BUDGET: u32 = 48 * 1024;
/// Blocks per SM below which the planner assumes memory is not kept busy.
const MIN_BLOCKS_PER_SM: u32 = 3;
/// What staging a block's activations costs, in chunks of streaming.
const STAGING_CHUNKS: u32 = 2;

/// The schedule of one GEMV launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemvPlan {
    /// K splits (grid.y).
    pub splits: u32,
    /// 64-column chunks per split.
    pub chunks_per_split: u32,
    /// 128-row groups (grid.x).
    pub row_groups: u32,
}

impl GemvPlan {
    /// Plans `out[m][n] = W[n][k]·act[m][k]`. The split count minimises the modelled time
    /// `max(blocks per SM, 3) × (chunks per split + 2)`: enough blocks per SM to keep memory
    /// busy (3 of 8 warps each), balanced waves, and a staging cost of about two chunks per
    /// block; the staged activations must fit the shared-memory budget. Ties go to fewer splits.
    pub fn new(n: usize, k: usize, m: usize, sm_count: u32) -> Self {
        let (n, k_tiles, m) = (n as u32, (k / TILE_K) as u32, m as u32);
        let row_groups = n.div_ceil(GEMV_ROWS_PER_BLOCK);
        let max_chunks = ((GEMV_SMEM_BUDGET - GEMV_SMEM_HEADER) / (m * TILE_K as u32 * 2)).max(1);
        let sms = sm_count.max(1);
        let k_tiles = k_tiles.max(1);
        let mut best: Option<(u64, GemvPlan)> = None;
        for s in k_tiles.div_ceil(max_chunks)..=k_tiles {
            let chunks = k_tiles.div_ceil(s);
            let splits = k_tiles.div_ceil(chunks);
            if splits != s {
                continue; // the same schedule as a smaller s
            }
            let per_sm = (row_groups * splits).div_ceil(sms).max(MIN_BLOCKS_PER_SM);
            let cost = per_sm as u64 * (chunks + STAGING_CHUNKS) as u64;
            if best.is_none_or(|(c, _)| cost < c) {
                best = Some((cost, GemvPlan { splits, chunks_per_split: chunks, row_groups }));
            }
        }
        best.expect("at least one split count fits").1
    }

    /// f32 elements of split-K workspace this plan needs for `projs` projections.
    pub fn workspace_elems(&self, n: usize, m: usize) -> usize {
        if self.splits > 1 {
            self.splits as usize * 2 * m * n
        } else {
            0
        }
    }

    /// Fills the schedule fields of `p` and returns the launch.
    pub fn launch<'a>(&self, kernel: &'static str, p: &'a mut GemvParams) -> Launch<'a> {
        p.splits = self.splits;
        p.chunks_per_split = self.chunks_per_split;
        Launch {
            kernel,
            grid: (self.row_groups, self.splits, 1),
            block: (GEMV_THREADS, 1, 1),
            smem: gemv_smem_bytes(p.m, self.chunks_per_split),
            params: p.as_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_cover_k_and_fit_shared_memory() {
        for &(n, k) in &[(14336usize, 4096usize), (4096, 14336), (8192, 28672), (28672, 8192), (64, 128), (1536, 8960)] {
            for m in 1..=8 {
                let p = GemvPlan::new(n, k, m, 132);
                let k_tiles = (k / 64) as u32;
                assert!(p.splits >= 1 && p.chunks_per_split >= 1);
                assert!(p.splits * p.chunks_per_split >= k_tiles, "{n}x{k} m={m}: {p:?} misses columns");
                assert!((p.splits - 1) * p.chunks_per_split < k_tiles, "{n}x{k} m={m}: {p:?} has an empty split");
                assert!(gemv_smem_bytes(m as u32, p.chunks_per_split) <= GEMV_SMEM_BUDGET, "{n}x{k} m={m}: {p:?}");
            }
        }
    }
}
