//! Launch planning for the GEMV family: how many K splits, and the grid.
use crate::backend::Launch;
use denseffn_device::formats::nvfp4::TILE_K;
use denseffn_device::params::{
    gemv_smem_bytes, source, GemvParams, ParamBlock, GEMM_WG_ROWS, GEMM_WG_TOKENS,
    GEMV_ROWS_PER_BLOCK, GEMV_SMEM_HEADER, GEMV_SMEM_PER_TOKEN_CHUNK, GEMV_THREADS,
};

/// Shared memory one GEMV block may take (so four blocks fit on an SM).
pub const GEMV_SMEM_BUDGET: u32 = 48 * 1024;
/// Resident blocks per SM the planner assumes instead of the backend's occupancy figure
/// (`DENSEFFN_GEMV_BLOCKS_PER_SM` = 1..=16, read once per process: a tuning knob for
/// benchmarks), if set.
fn blocks_per_sm_override() -> Option<u32> {
    static V: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("DENSEFFN_GEMV_BLOCKS_PER_SM")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|v| (1..=16).contains(v))
    })
}

/// The most resident GEMV blocks an SM can hold (2048 threads / [`GEMV_THREADS`]): the bound
/// scratch sizing plans for.
pub const MAX_RESIDENT_BLOCKS: u32 = 2048 / GEMV_THREADS;

/// Where a GEMV launch's B fragments come from, which decides what bounds its K splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staging {
    /// Each block stages its split into shared memory first: the shared memory grows with
    /// m × split, and the staging is a prologue whose cost grows with m.
    Split,
    /// Read from a [`source::PACKED`] buffer an earlier launch made: only the fixed header
    /// of shared memory, no prologue.
    Packed,
}

impl Staging {
    /// The staging of a launch reading `src` (one of `source::*`).
    pub fn of_source(src: u32) -> Staging {
        if src == source::PACKED {
            Staging::Packed
        } else {
            Staging::Split
        }
    }

    /// The fixed cost of one block (its staging, the epilogue) in units of one 64-column
    /// chunk of streaming, for `m` tokens: the planner's model of what an extra split costs.
    fn block_overhead_chunks(self, m: u32) -> u32 {
        match self {
            Staging::Split => 2 + m.div_ceil(2),
            Staging::Packed => 2,
        }
    }

    /// Dynamic shared memory of one block for `m` tokens and `chunks_per_split`.
    pub fn smem_bytes(self, m: u32, chunks_per_split: u32) -> u32 {
        match self {
            Staging::Split => gemv_smem_bytes(m, chunks_per_split),
            Staging::Packed => GEMV_SMEM_HEADER,
        }
    }
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
    /// Plans `out[m][n] = W[n][k]·act[m][k]` for a kernel with `staging` of which `resident`
    /// blocks fit one of `sm_count` SMs. Of the K splits whose staged activations fit the
    /// shared-memory budget (any split for [`Staging::Packed`]), it takes the one with the
    /// least modelled time: whole waves of blocks (`⌈blocks / (resident · sm_count)⌉`) × each
    /// block's chunks plus its fixed cost (`Staging::block_overhead_chunks`); a partial
    /// last wave costs a whole one, so the plan fills the machine evenly. Ties go to fewer
    /// splits (less staging and split-K traffic).
    pub fn new(
        n: usize,
        k: usize,
        m: usize,
        sm_count: u32,
        resident: u32,
        staging: Staging,
    ) -> Self {
        let (n, k_tiles, m) = (n as u32, ((k / TILE_K) as u32).max(1), m as u32);
        let row_groups = n.div_ceil(GEMV_ROWS_PER_BLOCK).max(1);
        let resident = blocks_per_sm_override().unwrap_or(resident).max(1);
        let slots = (resident * sm_count.max(1)).max(1);
        let max_chunks = match staging {
            Staging::Split => {
                ((GEMV_SMEM_BUDGET - GEMV_SMEM_HEADER) / (m * GEMV_SMEM_PER_TOKEN_CHUNK)).max(1)
            }
            Staging::Packed => k_tiles,
        };
        let min_splits = k_tiles.div_ceil(max_chunks).min(k_tiles);
        // Beyond 8 waves more splits only add staging.
        let max_splits = (8 * slots).div_ceil(row_groups).clamp(min_splits, k_tiles);
        let overhead = staging.block_overhead_chunks(m) as u64;
        let mut best: Option<(u64, GemvPlan)> = None;
        for s in min_splits..=max_splits {
            let chunks_per_split = k_tiles.div_ceil(s);
            let splits = k_tiles.div_ceil(chunks_per_split);
            let waves = (row_groups * splits).div_ceil(slots) as u64;
            let cost = waves * (chunks_per_split as u64 + overhead);
            if best.is_none_or(|(c, _)| cost < c) {
                let plan = GemvPlan {
                    splits,
                    chunks_per_split,
                    row_groups,
                };
                best = Some((cost, plan));
            }
        }
        best.map(|(_, p)| p).unwrap_or(GemvPlan {
            splits: 1,
            chunks_per_split: k_tiles,
            row_groups,
        })
    }

    /// f32 elements of split-K workspace this plan needs for `projs` projections.
    pub fn workspace_elems(&self, n: usize, m: usize) -> usize {
        if self.splits > 1 {
            self.splits as usize * 2 * m * n
        } else {
            0
        }
    }

    /// Fills the schedule fields of `p` and returns the launch (its shared memory as
    /// `p.source` needs).
    pub fn launch<'a>(&self, kernel: &'static str, p: &'a mut GemvParams) -> Launch<'a> {
        p.splits = self.splits;
        p.chunks_per_split = self.chunks_per_split;
        Launch {
            kernel,
            grid: (self.row_groups, self.splits, 1),
            block: (GEMV_THREADS, 1, 1),
            smem: Staging::of_source(p.source).smem_bytes(p.m, self.chunks_per_split),
            params: p.as_bytes(),
        }
    }
}

/// Most blocks per SM a split-K prefill GEMM is planned for: the GEMMs take 125–236 registers
/// per thread at 256 threads, so no more than 2 ever fit.
pub const GEMM_MAX_RESIDENT: u32 = 2;
/// Fewest 64-column chunks of K a prefill GEMM split gets (below that the split's fixed cost,
/// its first loads and the partial's round trip, is not worth a block).
pub const GEMM_MIN_SPLIT_CHUNKS: u32 = 16;
/// Most K splits of a prefill GEMM.
pub const GEMM_MAX_SPLITS: u32 = 8;

/// K splits of a single-projection prefill GEMM whose grid has `blocks` (row block × token
/// block) tiles over `k` columns, for a kernel of which `resident` blocks fit one of `sm_count`
/// SMs: `(splits, chunks_per_split)`. A grid that already fills half the machine's slots is
/// not split; a smaller one is split until `splits × blocks` fills at most one wave of
/// `min(resident, GEMM_MAX_RESIDENT) × sm_count` slots, with at least
/// [`GEMM_MIN_SPLIT_CHUNKS`] chunks and at most [`GEMM_MAX_SPLITS`] splits, none empty. So
/// `splits × blocks ≤ GEMM_MAX_RESIDENT × sm_count` whenever `splits > 1`, which bounds the
/// workspace ([`gemm_split_ws_elems`]).
pub fn gemm_splits(blocks: u32, k: usize, sm_count: u32, resident: u32) -> (u32, u32) {
    let k_tiles = ((k / TILE_K) as u32).max(1);
    let slots = resident.clamp(1, GEMM_MAX_RESIDENT) * sm_count.max(1);
    let s = (slots / blocks.max(1))
        .min(k_tiles / GEMM_MIN_SPLIT_CHUNKS)
        .min(GEMM_MAX_SPLITS);
    if s <= 1 {
        return (1, k_tiles);
    }
    let cps = k_tiles.div_ceil(s);
    (k_tiles.div_ceil(cps), cps)
}

/// The tail split of a gate+up prefill GEMM whose grid has `tiles` blocks over `k` columns, for
/// a kernel of which one block fills an SM (`bf16_gemm_gate_up_act_splitk`) on `sm_count`
/// SMs: `(split_from, splits, chunks_per_split)`, or `None` when the last wave is full. The
/// `r = tiles mod sm_count` tiles of the last, partial wave get the K splits [`gemm_splits`]
/// gives `r` blocks, so that wave fills the machine instead of leaving `sm_count − r` SMs idle
/// for a whole tile's time; the tiles before run whole. The partials take
/// `r × splits × 2 × 128 × 128` f32, `r × splits ≤ sm_count` ([`gemm_split_ws_elems`]).
pub fn gemm_tail_split(tiles: u32, k: usize, sm_count: u32) -> Option<(u32, u32, u32)> {
    let r = tiles % sm_count.max(1);
    if r == 0 {
        return None;
    }
    let (splits, cps) = gemm_splits(r, k, sm_count, 1);
    (splits > 1).then_some((tiles - r, splits, cps))
}

/// f32 elements of split-K workspace that any plan of an `h × i` layer's prefill over up to
/// `max_tokens` tokens needs: a down [`gemm_splits`] plan takes `splits × tokens × h`, at most
/// one wave of `GEMM_WG_ROWS × GEMM_WG_TOKENS` tiles; with `tail` (a BF16 layer), a gate+up
/// [`gemm_tail_split`] takes at most `sm_count` (and 8 per tile) tiles' two projections.
pub fn gemm_split_ws_elems(
    h: usize,
    i: usize,
    max_tokens: usize,
    sm_count: u32,
    tail: bool,
) -> usize {
    let tile = (GEMM_WG_ROWS * GEMM_WG_TOKENS) as usize;
    let wave = (GEMM_MAX_RESIDENT * sm_count.max(1)) as usize * tile;
    let down = wave.min(GEMM_MAX_SPLITS as usize * max_tokens * h);
    let tiles = i.div_ceil(GEMM_WG_ROWS as usize) * max_tokens.div_ceil(GEMM_WG_TOKENS as usize);
    let gate_up = (sm_count.max(1) as usize).min(GEMM_MAX_SPLITS as usize * tiles) * 2 * tile;
    if tail {
        down.max(gate_up)
    } else {
        down
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_splits_fill_the_last_wave_only() {
        // 8B gate+up at N = 512: 112 × 4 tiles on 132 SMs, one block each: 52 in the last wave.
        assert_eq!(gemm_tail_split(448, 4096, 132), Some((396, 2, 32)));
        // Full last wave, or a K too short to split: nothing.
        assert_eq!(gemm_tail_split(264, 4096, 132), None);
        assert_eq!(gemm_tail_split(140, 1024, 132), None);
        // 70B at N = 512: 896 tiles, 104 in the last wave: 2 splits would not fit 132 SMs.
        assert_eq!(gemm_tail_split(896, 8192, 132), None);
        // A grid smaller than one wave is all tail.
        assert_eq!(gemm_tail_split(20, 4096, 132), Some((0, 4, 16)));
        for tiles in 1..600 {
            for k in [1024usize, 4096, 8192] {
                if let Some((from, s, cps)) = gemm_tail_split(tiles, k, 132) {
                    let k_tiles = (k / 64) as u32;
                    assert!((tiles - from) * s <= 132 && from % 132 == 0);
                    assert!(s * cps >= k_tiles && (s - 1) * cps < k_tiles);
                    let ws = gemm_split_ws_elems(k, 128 * tiles as usize, 128, 132, true);
                    assert!(((tiles - from) * s * 2 * 128 * 128) as usize <= ws);
                }
            }
        }
    }

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
                for resident in 1..=MAX_RESIDENT_BLOCKS {
                    let p = GemvPlan::new(n, k, m, 132, resident, Staging::Split);
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

    /// The wave model on Llama-3-70B's shapes (132 SMs): down (64 row groups × 448 chunks,
    /// 4 resident) fits in exactly one wave with 8 splits (512 blocks of 56 chunks) rather
    /// than spilling 48 blocks of a 9-split plan into a second wave; gate+up (224 row groups ×
    /// 128 chunks, 3 resident) takes 5 splits: 1120 blocks, 2.8 waves of 26 chunks, cheaper in
    /// the model than 3 splits' 1.7 waves of 43 chunks.
    #[test]
    fn plans_fill_whole_waves() {
        let down = GemvPlan::new(8192, 28672, 1, 132, 4, Staging::Split);
        assert_eq!((down.splits, down.chunks_per_split), (8, 56));
        assert!(down.row_groups * down.splits <= 4 * 132);
        let gate_up = GemvPlan::new(28672, 8192, 1, 132, 3, Staging::Split);
        assert_eq!((gate_up.splits, gate_up.chunks_per_split), (5, 26));
        // More resident blocks per SM never make the plan use fewer splits than one wave
        // needs to cover the machine.
        for resident in 1..=MAX_RESIDENT_BLOCKS {
            let p = GemvPlan::new(4096, 14336, 1, 132, resident, Staging::Split);
            let blocks = p.row_groups * p.splits;
            assert!(
                blocks * 10 >= 8 * resident * 132 || p.splits == 224,
                "resident {resident}: {p:?} leaves SMs idle"
            );
        }
    }

    /// At m = 8 the staged kernels' shared memory (8 tokens × 144 bytes per chunk, 48 KB
    /// budget: 42 chunks) forces 70B down into at least 11 splits; a packed launch's shared
    /// memory is fixed, so its splits follow the wave model alone, and every packed plan
    /// still covers K without an empty split.
    #[test]
    fn packed_plans_are_not_bounded_by_shared_memory() {
        let split = GemvPlan::new(8192, 28672, 8, 132, 3, Staging::Split);
        assert!(split.splits >= 11, "{split:?}");
        let packed = GemvPlan::new(8192, 28672, 8, 132, 3, Staging::Packed);
        assert!(packed.splits < split.splits, "{packed:?} vs {split:?}");
        for m in 1..=8 {
            for resident in 1..=MAX_RESIDENT_BLOCKS {
                let p = GemvPlan::new(4096, 14336, m, 132, resident, Staging::Packed);
                assert!(p.splits * p.chunks_per_split >= 224, "{p:?}");
                assert!((p.splits - 1) * p.chunks_per_split < 224, "{p:?}");
            }
        }
        assert_eq!(Staging::of_source(source::PACKED), Staging::Packed);
        assert_eq!(Staging::of_source(source::BF16), Staging::Split);
        assert_eq!(Staging::Packed.smem_bytes(8, 100), GEMV_SMEM_HEADER);
    }

    /// A tiny matrix (fewer row groups and chunks than SMs) still gets a valid plan.
    #[test]
    fn tiny_matrices_plan() {
        let p = GemvPlan::new(16, 64, 8, 132, 8, Staging::Packed);
        assert_eq!((p.splits, p.chunks_per_split, p.row_groups), (1, 1, 1));
    }

    /// Small prefill grids are split to fill one wave, large ones are not; splits cover K with
    /// none empty and stay within the workspace bound.
    #[test]
    fn gemm_splits_fill_small_grids_only() {
        // 8B down at N = 512: 16 × 8 tiles, 2 per SM fit → 2 splits; at N = 128: 8 splits.
        assert_eq!(gemm_splits(128, 14336, 132, 2), (2, 112));
        assert_eq!(gemm_splits(32, 14336, 132, 2).0, 8);
        // N = 4096: 1024 tiles, no split; one block per SM and 128 tiles: none either.
        assert_eq!(gemm_splits(1024, 14336, 132, 2).0, 1);
        assert_eq!(gemm_splits(128, 14336, 132, 1).0, 1);
        // Short K: no split below 2 × GEMM_MIN_SPLIT_CHUNKS chunks.
        assert_eq!(gemm_splits(1, 64 * 31, 132, 2).0, 1);
        for blocks in 1..300 {
            for k in [64, 1024, 4096, 5120, 14336, 28672] {
                let k_tiles = (k / 64) as u32;
                let (s, cps) = gemm_splits(blocks, k, 132, 8);
                assert!(
                    s * cps >= k_tiles && (s - 1) * cps < k_tiles,
                    "{blocks} {k}"
                );
                if s > 1 {
                    assert!(s * blocks <= GEMM_MAX_RESIDENT * 132 && cps >= GEMM_MIN_SPLIT_CHUNKS);
                    // A grid of `blocks` tiles holds at most blocks × 256 × 64 outputs.
                    let outputs = blocks as usize * 256 * 64;
                    assert!(
                        s as usize * outputs
                            <= gemm_split_ws_elems(usize::MAX / 64, 1, 1, 132, false)
                    );
                }
            }
        }
    }
}
