//! Launch planning for the GEMV family: how many K splits, and the grid.
use crate::backend::Launch;
use denseffn_device::formats::nvfp4::TILE_K;
use denseffn_device::params::{
    gemv_smem_bytes, GemvParams, ParamBlock, GEMV_ROWS_PER_BLOCK, GEMV_SMEM_HEADER,
    GEMV_SMEM_PER_TOKEN_CHUNK, GEMV_THREADS,
};

/// Shared memory one GEMV block may take (so four blocks fit on an SM).
pub const GEMV_SMEM_BUDGET: u32 = 48 * 1024;
/// Blocks per SM the planner aims for (default 4; `DENSEFFN_GEMV_BLOCKS_PER_SM` = 1..=16
/// overrides it, read once per process: a tuning knob for benchmarks).
fn blocks_per_sm() -> u32 {
    static V: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("DENSEFFN_GEMV_BLOCKS_PER_SM")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|v| (1..=16).contains(v))
            .unwrap_or(4)
    })
}

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
    /// Plans `out[m][n] = W[n][k]·act[m][k]`: enough splits to give every SM several blocks,
    /// and few enough chunks per split that the staged activations fit the shared-memory budget.
    pub fn new(n: usize, k: usize, m: usize, sm_count: u32) -> Self {
        let (n, k_tiles, m) = (n as u32, (k / TILE_K) as u32, m as u32);
        let row_groups = n.div_ceil(GEMV_ROWS_PER_BLOCK);
        let max_chunks =
            ((GEMV_SMEM_BUDGET - GEMV_SMEM_HEADER) / (m * GEMV_SMEM_PER_TOKEN_CHUNK)).max(1);
        let for_occupancy = (blocks_per_sm() * sm_count).div_ceil(row_groups);
        let splits = for_occupancy
            .max(k_tiles.div_ceil(max_chunks))
            .clamp(1, k_tiles.max(1));
        let chunks_per_split = k_tiles.div_ceil(splits);
        GemvPlan {
            splits: k_tiles.div_ceil(chunks_per_split),
            chunks_per_split,
            row_groups,
        }
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
        for &(n, k) in &[
            (14336usize, 4096usize),
            (4096, 14336),
            (8192, 28672),
            (28672, 8192),
            (64, 128),
            (1536, 8960),
        ] {
            for m in 1..=8 {
                let p = GemvPlan::new(n, k, m, 132);
                let k_tiles = (k / 64) as u32;
                assert!(p.splits >= 1 && p.chunks_per_split >= 1);
                assert!(
                    p.splits * p.chunks_per_split >= k_tiles,
                    "{n}x{k} m={m}: {p:?} misses columns"
                );
                assert!(
                    (p.splits - 1) * p.chunks_per_split < k_tiles,
                    "{n}x{k} m={m}: {p:?} has an empty split"
                );
                assert!(
                    gemv_smem_bytes(m as u32, p.chunks_per_split) <= GEMV_SMEM_BUDGET,
                    "{n}x{k} m={m}: {p:?}"
                );
            }
        }
    }
}
