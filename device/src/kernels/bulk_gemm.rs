//! Prefill GEMM over the BF16 overlay's tiles (`wgmma`, sm_90a), warp-specialized: `Y[t] = W·X[t]`
//! for many tokens, both operands handed to the tensor cores from shared memory by descriptor.
//!
//! A block is 384 threads over 256 weight rows × 128 tokens ([`GEMM_WG_TOKENS`]): two consumer
//! warpgroups (warps 0–7) and one producer warpgroup (warps 8–11). The rows are gate's and up's
//! [`GEMM_WG_ROWS`] = 128 each in the gate+up kernel, [`GEMM_BULK_WIDE_ROWS`] = 256 of the one
//! matrix in the single-projection kernels. Consumer warpgroup `w` multiplies its 64 tokens
//! (`64w ..`, the A operand) with all 256 rows (the B operand), one `wgmma.m64n256k16` a
//! 16-column step, 128 f32 accumulators a thread: each product reads 2 KiB of activations and
//! 8 KiB of weights from shared memory, where two `m64n128k16` over 64-row weight slices with
//! all 128 tokens (the form before) read 12 KiB for the same work. The stages (64-column
//! chunks, [`GEMM_BULK_STAGES`] deep, 16 weight tiles each) are handed over by `mbarrier`s, not
//! block barriers:
//! - the producer waits for a stage's *empty* barrier (every consumer warp released the chunk
//!   that was there), announces the weight bytes on its *full* barrier and fills it: each of
//!   the block's 16 row tiles (2 KiB of bf16 in `wgmma`'s canonical layout, the
//!   overlay's tile as it is in global memory) by one bulk copy (`cp.async.bulk`, one thread
//!   each), the activations (the tile's 128 tokens × 128 bytes, K-major, 128-byte swizzle) by
//!   one TMA copy (`cp.async.bulk.tensor`) through the tensor map `GemmParams::xmap`, which
//!   the kernel reads in place in its parameter block (tokens past the last land as zeros);
//!   everything lands through the async proxy and completes on the stage's one barrier (the
//!   form before, 1024 `cp.async` pieces a chunk from the producer's 128 threads, each
//!   signalling its own completion, then a proxy fence in every consumer warp, was
//!   `docs/perf/2026-12-06-bf16-bulk.md`'s);
//! - a consumer warpgroup waits for the full barrier, issues its 4 × `wgmma.m64n256k16`, and
//!   releases the stage of the chunk before once that chunk's products are done
//!   (`wgmma.wait_group 1`: one chunk's products stay in flight).
//!
//! The kernels are persistent: the grid is one block per SM (`params::gemm_grid`), and block
//! `b` runs the launch's units of work `b, b + gridDim.x, …` ([`gemm_bulk_units`]: output
//! tiles, or the K splits of a tile) one after another, the tiles walked in groups of
//! [`GEMM_WG_GROUP`] row blocks (`super::tile_of`). The ring's chunk count runs on across
//! units, so the producer fills the stages with the next unit's first chunks while the
//! consumers store the last unit's outputs, and no block pays a launch, a barrier set-up and
//! an empty pipeline per tile. The
//! dual kernel (gate+up) applies the activation in its epilogue and writes `act(gate)·up` as
//! bf16, the down GEMM's input, as the other formats' GEMMs do; a thread holds two adjacent
//! rows of a token, so every store is a bf16 pair ([`store_block`]). A split unit stores f32
//! partials; the last of a tile's splits to finish (counted among the consumer warps, the
//! producer being on in the next unit) sums them in split order.
//!
//! The `_x2` entry points run the same kernels in clusters of two blocks (declared
//! `.reqnctapercluster 2` by the build): a unit is a pair of tiles of one row block and two
//! adjacent token blocks, one a block, so both read the same weight chunks. Each block copies
//! half of a chunk's 16 weight tiles (gate's or up's, the wide block's first or second half)
//! into both blocks' stage at once (`cp.async.bulk … .multicast::cluster`), completing on
//! each block's full barrier, and its own tokens by TMA: 32 KiB of L2 reads a block and chunk
//! instead of 48. A stage is free again once both blocks' consumers have released it (each
//! consumer warp arrives on its own and its partner's empty barrier), so the pair runs its
//! ring in lockstep. The host uses them over an even number of token blocks
//! (`DENSEFFN_GEMM_PAIR=0` turns them off).
use super::wgemm::{act_mul, sum_splits, write_split_sums};
use crate::dsl::*;
use crate::formats::nvfp4::{TILE_K, TILE_ROWS};
use crate::formats::tiles::TileFormat;
use crate::params::{
    gemm_bulk_units, gemm_wg_stage_bytes, GemmParams, GEMM_BULK_BARRIER_BYTES, GEMM_BULK_STAGES,
    GEMM_BULK_WIDE_ROWS, GEMM_WG_GROUP, GEMM_WG_ROWS, GEMM_WG_TOKENS,
};

/// What a format decides in the persistent GEMM: its stages (chunks of K), its weight tiles'
/// bytes, the rows of its single-projection block, its consumers' products and its epilogue.
/// The producer warpgroup, the ring of stages, the units and the cluster pairs are shared
/// ([`bulk_gemm`]). A stage holds the activation box (128 tokens × 128 bytes, 128-byte
/// swizzle, by TMA) at its start, then per 128-row slice (gate's and up's; the single
/// projection's [`BulkFormat::SINGLE_SLICES`]) its 8 row tiles' [`BulkFormat::CHUNK_TILES`]
/// tiles, each row tile's one bulk copy (they lie back to back in global memory).
pub(super) trait BulkFormat {
    /// A consumer thread's accumulators over one unit.
    type Acc;
    /// 64-column tiles of K a stage carries.
    const CHUNK_TILES: u32;
    /// Bytes of one 16 × 64 weight tile.
    const TILE_BYTES: u32;
    /// 128-row slices of the single-projection block.
    const SINGLE_SLICES: u32;
    /// Arrivals a consumer warp makes on a stage's empty barrier: 1 (lane 0) where only
    /// `wgmma` reads the stage, 32 (every lane) where the lanes also read it with `ld.shared`,
    /// so each lane's own arrival orders its reads before the producer's next copy into the
    /// stage (a warp sync is no such order for compute-sanitizer's racecheck: ptxas drops it
    /// in a converged warp).
    const RELEASE_LANES: u32 = 1;
    /// Registers a consumer thread gets by `setmaxnreg` (the producer warpgroup giving up
    /// its share: 2 · 128 · (N − 168) = 128 · (168 − its)), or 0 to keep the launch's 168.
    const CONSUMER_REGS: u32;
    /// Bytes of a stage (`dual`: gate+up).
    fn stage_bytes(dual: bool) -> u32;
    /// Stages of the ring (at most 7).
    fn stages(dual: bool) -> u32;
    /// Accumulators at the start of a unit.
    fn zero() -> Self::Acc;
    /// A consumer warp, one unit: its products over the unit's chunks (the block's ring
    /// chunks `i0 ..`), each stage released once its products are done.
    unsafe fn consume<const DUAL: bool, const PAIR: bool>(
        p: &GemmParams,
        ring: &Ring,
        w: &Unit,
        i0: u32,
        acc: &mut Self::Acc,
    );
    /// The consumers' epilogue of unit `w`.
    unsafe fn store_unit<const DUAL: bool>(p: &GemmParams, ring: &Ring, w: Unit, acc: &Self::Acc);
}

/// The BF16 overlay's tiles (`wgmma` canonical layout, read by descriptor): 64 columns a stage.
pub(super) struct Bf16Tiles;

impl BulkFormat for Bf16Tiles {
    type Acc = [f32; 128];
    const CHUNK_TILES: u32 = 1;
    const TILE_BYTES: u32 = TILE_BYTES;
    const SINGLE_SLICES: u32 = GEMM_BULK_WIDE_ROWS / GEMM_WG_ROWS;
    const CONSUMER_REGS: u32 = 0;
    #[inline(always)]
    fn stage_bytes(_dual: bool) -> u32 {
        gemm_wg_stage_bytes(true, TILE_BYTES, 0)
    }
    #[inline(always)]
    fn stages(_dual: bool) -> u32 {
        GEMM_BULK_STAGES
    }
    #[inline(always)]
    fn zero() -> [f32; 128] {
        [0.0; 128]
    }
    #[inline(always)]
    unsafe fn consume<const DUAL: bool, const PAIR: bool>(
        _p: &GemmParams,
        ring: &Ring,
        w: &Unit,
        i0: u32,
        acc: &mut [f32; 128],
    ) {
        consume::<PAIR>(ring, i0, w.chunks.1, acc)
    }
    #[inline(always)]
    unsafe fn store_unit<const DUAL: bool>(p: &GemmParams, ring: &Ring, w: Unit, acc: &[f32; 128]) {
        store_unit::<DUAL>(p, ring, w, acc)
    }
}

// The full and empty barriers (8 bytes a stage, 64 bytes apart) leave the flag slot free.
const _: () = assert!(GEMM_BULK_STAGES <= 7 && GEMM_BULK_BARRIER_BYTES == 128);

/// Bytes of one activation chunk in shared memory (tokens × 128 bytes: 64 bf16, 128 E4M3).
pub(super) const X_BYTES: u32 = GEMM_WG_TOKENS * 128;
/// Bytes of one 16 × 64 bf16 tile.
const TILE_BYTES: u32 = TileFormat::Bf16.code_bytes() as u32;
/// Row tiles per slice (a projection of the gate+up kernel, a half of the wide block).
pub(super) const ROW_TILES: u32 = GEMM_WG_ROWS / TILE_ROWS as u32;
/// Consumer warps (two warpgroups); the producer warpgroup follows them.
const CONSUMER_WARPS: u32 = 8;

/// The block's stages and barriers in shared memory.
pub(super) struct Ring {
    base: Smem,
    stage_bytes: u32,
    stages: u32,
}

impl Ring {
    #[inline(always)]
    fn new(stage_bytes: u32, stages: u32) -> Ring {
        Ring {
            base: Smem((Smem::base().0 + 1023) & !1023),
            stage_bytes,
            stages,
        }
    }

    /// The stage of the block's chunk `i`.
    #[inline(always)]
    pub(super) fn stage(&self, i: u32) -> Smem {
        self.base.add((i % self.stages) * self.stage_bytes)
    }

    /// The barrier that completes when chunk `i`'s copies have landed.
    #[inline(always)]
    pub(super) fn full(&self, i: u32) -> Smem {
        self.base
            .add(self.stages * self.stage_bytes + (i % self.stages) * 8)
    }

    /// The barrier that completes when every consumer warp is done with chunk `i`.
    #[inline(always)]
    pub(super) fn empty(&self, i: u32) -> Smem {
        self.full(i).add(64)
    }

    /// A 4-byte slot after the barriers, for the split-K completion flag (consumers only).
    #[inline(always)]
    fn flag(&self) -> Smem {
        self.full(0).add(GEMM_BULK_BARRIER_BYTES - 8)
    }

    /// The parity of chunk `i`'s phase of its stage's barriers.
    #[inline(always)]
    pub(super) fn parity(&self, i: u32) -> u32 {
        (i / self.stages) & 1
    }
}

/// Arrivals a full barrier expects a phase: the producer's announcement of the stage's bytes
/// (weights and activations, all by bulk copy).
const FULL_ARRIVALS: u32 = 1;

/// The producer warpgroup, one unit: fills the stages with chunks `c_begin ..` (`chunks` of
/// them) of tile `tile`, the block's ring chunks `i0 ..`, each once the consumers have released
/// the ring chunk `stages` before it. `xmap`: the generic address of the activations' tensor
/// map (`GemmParams::xmap`).
#[inline(always)]
unsafe fn produce<F: BulkFormat, const DUAL: bool, const PAIR: bool>(
    p: &GemmParams,
    ring: &Ring,
    xmap: u64,
    tile: (u32, u32),
    (c_begin, chunks): (u32, u32),
    i0: u32,
) {
    let pt = thread_x() - 32 * CONSUMER_WARPS;
    let k_tiles = p.k / TILE_K as u32;
    let row_tiles = p.n / TILE_ROWS as u32;
    let slices = if DUAL { 2 } else { F::SINGLE_SLICES };
    // Slice `s`'s first row tile: gate's and up's are the same, the single projection's
    // slices 8 apart.
    let first = |s: u32| {
        (if DUAL {
            tile.0
        } else {
            F::SINGLE_SLICES * tile.0 + s
        }) * ROW_TILES
    };
    // Row tiles past the matrix are not copied: their rows' outputs are never stored, and a
    // product row reads only its own row of the weights.
    let valid = |s: u32| {
        if s < slices {
            row_tiles.saturating_sub(first(s)).min(ROW_TILES)
        } else {
            0
        }
    };
    // Thread `pt`'s bulk copy: slice `pt / 8`, row tile `pt % 8`. A cluster pair shares the
    // weights (both blocks have the same row tiles and chunks): block `rank` copies the first
    // or second half of the stage's row tiles to both blocks' stage (multicast), so each block
    // still receives every tile.
    let (sl, rt) = (pt / ROW_TILES, pt % ROW_TILES);
    let copies = rt < valid(sl) && (!PAIR || 2 * pt / (slices * ROW_TILES) == cluster_rank());
    let w = (if DUAL && sl == 1 { p.w1 } else { p.w0 }) as *const u8;
    let rt0 = first(sl);
    let row_tile_bytes = F::CHUNK_TILES * F::TILE_BYTES;
    for j in 0..chunks {
        let i = i0 + j;
        if i >= ring.stages {
            mbar_wait(ring.empty(i), ring.parity(i) ^ 1);
        }
        let (st, full, c) = (ring.stage(i), ring.full(i), c_begin + j);
        // The chunk's tiles of a row tile (the last chunk of an odd count of FP8 tiles: one).
        let kt = c * F::CHUNK_TILES;
        let tile_bytes = (k_tiles - kt).min(F::CHUNK_TILES) * F::TILE_BYTES;
        if pt == 0 {
            // The activations' box is always whole (tokens and columns past the ends read as
            // zeros).
            mbar_arrive_expect_tx(full, (valid(0) + valid(1)) * tile_bytes + X_BYTES);
            // The tile's tokens × this chunk's 64 columns: rows of 128 bytes, 16-byte pieces
            // swizzled by the row's index mod 8, the layout `desc_k128b` describes.
            tma_load_2d(st, xmap, (c * TILE_K as u32, tile.1 * GEMM_WG_TOKENS), full);
        }
        if copies {
            let src = w.add((((rt0 + rt) * k_tiles + kt) * F::TILE_BYTES) as usize);
            let dst = st.add(X_BYTES + (sl * ROW_TILES + rt) * row_tile_bytes);
            if PAIR {
                bulk_copy_multicast(dst, src, tile_bytes, full, 0b11);
            } else {
                bulk_copy(dst, src, tile_bytes, full);
            }
        }
    }
}

/// A consumer warp, one unit: per chunk (the block's ring chunks `i0 ..`, `chunks` of them),
/// waits for its stage, issues its warpgroup's products and releases the previous chunk's stage
/// once those products are done; the last chunk's once all are. Warpgroup `w` multiplies its
/// 64 tokens (`64w ..`, the A operand) with the block's 256 weight rows (B), one
/// `wgmma.m64n256k16` a 16-column step: `acc[4f + i]` is token `16·(warp % 4) + g + 8·(i / 2)`
/// of the warpgroup's, row `8f + 2t + i % 2` of the block's.
#[inline(always)]
unsafe fn consume<const PAIR: bool>(ring: &Ring, i0: u32, chunks: u32, acc: &mut [f32; 128]) {
    let wg = warp_id() / 4;
    for j in 0..chunks {
        let i = i0 + j;
        // Both operands came by bulk copy, through the async proxy `wgmma` reads from.
        mbar_wait(ring.full(i), ring.parity(i));
        let st = ring.stage(i);
        // The warpgroup's tokens: 64 rows of 128 bytes. The block's 16 weight tiles lie back to
        // back: eight-row groups 1024 bytes apart, core matrices along K 128 bytes apart, step
        // k 256 bytes in.
        let x = st.add(wg * 64 * 128);
        let w = st.add(X_BYTES);
        wgmma_fence();
        unroll4!(K, 0 => {
            let k = K as u32;
            wgmma_m64n256k16_bf16_ss(
                acc,
                desc_k128b(x.add(32 * k)),
                desc_k_plain(w.add(256 * k), 128, 1024),
            );
        });
        wgmma_commit();
        wgmma_wait::<1>();
        if j >= 1 && lane() == 0 {
            release::<PAIR>(ring.empty(i - 1));
        }
    }
    wgmma_wait::<0>();
    if chunks > 0 && lane() == 0 {
        release::<PAIR>(ring.empty(i0 + chunks - 1));
    }
}

/// A consumer warp's release of a stage: an arrival on its empty barrier, and with `PAIR` on
/// the partner block's too (the partner's producer multicasts into this block's stage). Made by
/// [`BulkFormat::RELEASE_LANES`] lanes of each warp (lane 0, or all).
#[inline(always)]
pub(super) unsafe fn release<const PAIR: bool>(empty: Smem) {
    mbar_arrive(empty);
    if PAIR {
        mbar_arrive_cluster(cluster_address(empty, cluster_rank() ^ 1));
    }
}

/// Where a consumer thread's outputs go: its token `j` (0, 1: `g`, `g + 8`) in the block's
/// token tile, and its row pair `f` (rows `8f + 2t`, `+1` of the block's 256).
#[inline(always)]
fn out_token(j: u32) -> u32 {
    64 * (warp_id() / 4) + 16 * (warp_id() % 4) + lane() / 4 + 8 * j
}

/// The first of row pair `f`'s two rows in the block.
#[inline(always)]
fn out_row(f: u32) -> u32 {
    8 * f + 2 * (lane() % 4)
}

/// Writes a consumer thread's outputs of block tile `tile` (`tile.0` counts
/// [`GEMM_BULK_WIDE_ROWS`]-row blocks of the single projection, [`GEMM_WG_ROWS`]-row blocks of
/// gate+up): bf16 `act(gate·s.0)·(up·s.1)` (gate rows 0..128 of `acc`, up rows 128..256), or the
/// single projection's 256 rows times `s.0`, to `p.out` (`[tokens][n]`); with K split
/// (`split = Some(z)`), f32 to split `z`'s slice of `p.ws` (`[split][tokens][n]`). Rows and
/// tokens past the ends are not written.
#[inline(always)]
unsafe fn store_block<const DUAL: bool>(
    p: &GemmParams,
    tile: (u32, u32),
    split: Option<u32>,
    acc: &[f32; 128],
    (s0, s1): (f32, f32),
) {
    let rows = if DUAL {
        GEMM_WG_ROWS
    } else {
        GEMM_BULK_WIDE_ROWS
    };
    let row0 = tile.0 * rows;
    unroll2!(J => {
        let tok = tile.1 * GEMM_WG_TOKENS + out_token(J as u32);
        if tok < p.tokens {
            unroll32!(F => {
                if !DUAL || F < 16 {
                    let row = row0 + out_row(F as u32);
                    let (a, b) = (acc[4 * F + 2 * J], acc[4 * F + 2 * J + 1]);
                    let y = if DUAL {
                        let (ua, ub) = (acc[4 * ((F + 16) % 32) + 2 * J], acc[4 * ((F + 16) % 32) + 2 * J + 1]);
                        [act_mul(p, a * s0, ua * s1), act_mul(p, b * s0, ub * s1)]
                    } else {
                        [a * s0, b * s0]
                    };
                    if row < p.n {
                        if let Some(z) = split {
                            let at = (z * p.tokens + tok) * p.n + row;
                            st_global_v2(
                                (p.ws as *mut f32).add(at as usize) as *mut u8,
                                [y[0].to_bits(), y[1].to_bits()],
                            );
                        } else {
                            let at = (tok * p.n + row) as usize;
                            *((p.out as *mut u16).add(at) as *mut u32) = pack_bf16x2(y[0], y[1]);
                        }
                    }
                }
            });
        }
    });
}

/// One unit of a launch's work: an output tile (`lin` in the launch's tile order, `tile` its
/// `(row block, token block)`) and the chunks of K it covers; `split`: which of the tile's K
/// splits, when K is split.
#[derive(Clone, Copy)]
pub(super) struct Unit {
    pub(super) tile: (u32, u32),
    split: Option<u32>,
    /// The first chunk (stage) of K and how many.
    pub(super) chunks: (u32, u32),
    /// This block's split tile, which its split counter and partials are indexed by: the
    /// single projection's `cluster · lin + rank`, the gate+up tail's `cluster · (lin −
    /// split_from) + rank` (0 for its whole tiles).
    id: u32,
    /// A pair's second tile past the last token block: computed (on zeros), never stored.
    pub(super) phantom: bool,
}

/// Unit `u` of a launch ([`gemm_bulk_units`] of them): without a split, tile `u`; the gate+up
/// kernel's tail split runs tiles `0 .. split_from` whole, then `splits` units a tile (its
/// splits in order); the single projection's split, split `u / tiles` of tile `u % tiles`.
#[inline(always)]
fn unit<F: BulkFormat, const DUAL: bool, const SPLIT: bool>(
    p: &GemmParams,
    u: u32,
    (c, rank): (u32, u32),
) -> Unit {
    let rows = block_rows::<F, DUAL>();
    let token_blocks = p.tokens.div_ceil(GEMM_WG_TOKENS);
    let grid = (p.n.div_ceil(rows), token_blocks.div_ceil(c));
    let tiles = grid.0 * grid.1;
    let splits = p.splits.max(1);
    let (lin, split) = if !SPLIT || splits == 1 {
        (u, None)
    } else if DUAL {
        if u < p.split_from {
            (u, None)
        } else {
            let j = u - p.split_from;
            (p.split_from + j / splits, Some(j % splits))
        }
    } else {
        (u % tiles, Some(u / tiles))
    };
    let k_tiles = p.k / TILE_K as u32;
    let chunks = match split {
        Some(z) => {
            let c0 = z * p.chunks_per_split;
            (c0, (c0 + p.chunks_per_split).min(k_tiles) - c0)
        }
        None => (0, k_tiles.div_ceil(F::CHUNK_TILES)),
    };
    let (r, tg) = super::tile_of(lin, GEMM_WG_GROUP, grid);
    let tile = (r, c * tg + rank);
    Unit {
        tile,
        split,
        chunks,
        id: c * if DUAL {
            lin.saturating_sub(p.split_from)
        } else {
            lin
        } + rank,
        phantom: tile.1 >= token_blocks,
    }
}

/// The persistent driver: block `b` runs units `b, b + gridDim.x, …` (`gemm_bulk_units`), its
/// producer warpgroup running ahead into the next unit's chunks while the consumers store
/// the last one's outputs; the ring's chunk count runs on across units. With `PAIR` the
/// launch is in clusters of two blocks, cluster `c` running units `c, c + gridDim.x / 2, …`,
/// each a pair of tiles of one row block and adjacent token blocks (block rank `q` the
/// second's `q`): the pair reads the same weight chunks, each block copying half of them to
/// both (multicast), so the pair's stages fill in lockstep and a stage is free again only
/// once both blocks' consumers have released it (its empty barrier counts both).
#[inline(always)]
pub(super) unsafe fn bulk_gemm<
    F: BulkFormat,
    const DUAL: bool,
    const SPLIT: bool,
    const PAIR: bool,
>(
    p: &GemmParams,
    xmap: u64,
) {
    let ring = Ring::new(F::stage_bytes(DUAL), F::stages(DUAL));
    let c = if PAIR { 2 } else { 1 };
    let rank = if PAIR { cluster_rank() } else { 0 };
    if thread_x() == 32 * CONSUMER_WARPS {
        prefetch_tensormap(xmap);
    }
    if thread_x() == 0 {
        for s in 0..ring.stages {
            mbar_init(ring.full(s), FULL_ARRIVALS);
            mbar_init(ring.empty(s), c * CONSUMER_WARPS * F::RELEASE_LANES);
        }
        fence_mbarrier_init();
    }
    // The partner's barriers must be initialised before this block's first remote arrival or
    // multicast names them.
    if PAIR {
        cluster_sync();
    } else {
        sync_threads();
    }
    let units = gemm_bulk_units(DUAL, block_rows::<F, DUAL>(), c, p);
    // Launched as the programmatic dependent of the kernel that writes its activations (the
    // FP8 × FP8 GEMMs after their quantizer), the block has set up its barriers under that
    // kernel's tail and waits for it only now; the kernel after it may launch at once (it
    // waits in turn). Both are no-ops for an ordinary launch.
    grid_dependency_wait();
    launch_dependents();
    let producer = warp_id() >= CONSUMER_WARPS;
    let units = (units, c, rank);
    if F::CONSUMER_REGS == PRODUCER_SHARE.1 {
        // Each warpgroup in its own copy of the loop after its `setmaxnreg`, so that ptxas
        // allocates the producer's code in its 40 registers.
        if producer {
            setmaxnreg_dec::<{ PRODUCER_SHARE.0 }>();
            run_units::<F, DUAL, SPLIT, PAIR>(p, &ring, xmap, units, true);
        } else {
            setmaxnreg_inc::<{ PRODUCER_SHARE.1 }>();
            run_units::<F, DUAL, SPLIT, PAIR>(p, &ring, xmap, units, false);
        }
    } else {
        run_units::<F, DUAL, SPLIT, PAIR>(p, &ring, xmap, units, producer);
    }
    // No block leaves while its partner may still multicast into it or arrive on its barriers.
    if PAIR {
        cluster_sync();
    }
}

/// This block's units (`units.0` of them in the launch, `units.1` blocks a unit, this block its
/// `units.2`-th): `b, b + gridDim.x / c, …`, the ring's chunk count running on across them;
/// the producer warpgroup fills their stages, the consumers multiply and store.
#[inline(always)]
unsafe fn run_units<F: BulkFormat, const DUAL: bool, const SPLIT: bool, const PAIR: bool>(
    p: &GemmParams,
    ring: &Ring,
    xmap: u64,
    (units, c, rank): (u32, u32, u32),
    producer: bool,
) {
    let mut i0 = 0;
    let mut u = block_x() / c;
    while u < units {
        let w = unit::<F, DUAL, SPLIT>(p, u, (c, rank));
        if producer {
            produce::<F, DUAL, PAIR>(p, ring, xmap, w.tile, w.chunks, i0);
        } else {
            let mut acc = F::zero();
            F::consume::<DUAL, PAIR>(p, ring, &w, i0, &mut acc);
            if !w.phantom {
                F::store_unit::<DUAL>(p, ring, w, &acc);
            }
        }
        i0 += w.chunks.1;
        u += grid_x() / c;
    }
}

/// Registers a thread of the producer warpgroup keeps, and a consumer's then, when a format
/// asks for more than the launch's 168 ([`BulkFormat::CONSUMER_REGS`]): the 384 threads' 64512
/// registers shared out again.
pub(super) const PRODUCER_SHARE: (u32, u32) = (40, 232);
const _: () = assert!(128 * PRODUCER_SHARE.0 + 256 * PRODUCER_SHARE.1 <= 384 * 168);

/// Rows of a block: gate's and up's [`GEMM_WG_ROWS`] each, or the single projection's slices.
#[inline(always)]
fn block_rows<F: BulkFormat, const DUAL: bool>() -> u32 {
    if DUAL {
        GEMM_WG_ROWS
    } else {
        F::SINGLE_SLICES * GEMM_WG_ROWS
    }
}

/// The consumers' epilogue of unit `w`: its outputs (bf16), or with K split its partials and,
/// in the tile's last block to finish, the sum of all its partials.
#[inline(always)]
unsafe fn store_unit<const DUAL: bool>(p: &GemmParams, ring: &Ring, w: Unit, acc: &[f32; 128]) {
    let s = (p.gscale0, p.gscale1);
    let Some(z) = w.split else {
        store_block::<DUAL>(p, w.tile, None, acc, s);
        return;
    };
    // The consumer warps only: the producer is on in the next unit.
    let sync = || named_barrier(1, 32 * CONSUMER_WARPS);
    if DUAL {
        let t = w.id;
        store_gate_up_partials(p, (t, z), acc, s);
        let counter = (p.counters as *mut u32).add(t as usize);
        if last_to_finish(counter, p.splits, ring.flag(), sync) {
            reduce_gate_up(p, w.tile, t);
        }
    } else {
        store_block::<DUAL>(p, w.tile, Some(z), acc, s);
        let counter = (p.counters as *mut u32).add(w.id as usize);
        if last_to_finish(counter, p.splits, ring.flag(), sync) {
            write_split_sums(
                p,
                w.tile,
                GEMM_BULK_WIDE_ROWS,
                GEMM_WG_TOKENS,
                32 * CONSUMER_WARPS,
            );
        }
    }
}

/// f32 of one projection's partial of one gate+up tile in the workspace.
const TILE_ELEMS: u32 = GEMM_WG_ROWS * GEMM_WG_TOKENS;

/// Split `z` of the gate+up kernel's split tile `t` (counted from `split_from`): this thread's
/// scaled f32 partials of gate and up, `[t][split][projection][token][row]` in `p.ws`.
#[inline(always)]
unsafe fn store_gate_up_partials(
    p: &GemmParams,
    (t, z): (u32, u32),
    acc: &[f32; 128],
    (s0, s1): (f32, f32),
) {
    let at = (t * p.splits + z) * 2 * TILE_ELEMS;
    let ws = (p.ws as *mut f32).add(at as usize);
    unroll2!(J => {
        let tok = out_token(J as u32);
        unroll32!(F => {
            let (pj, f, s) = if F < 16 { (0, F, s0) } else { (1, F - 16, s1) };
            let i = pj * TILE_ELEMS + tok * GEMM_WG_ROWS + out_row(f as u32);
            let v = [acc[4 * F + 2 * J] * s, acc[4 * F + 2 * J + 1] * s];
            st_global_v2(ws.add(i as usize) as *mut u8, [v[0].to_bits(), v[1].to_bits()]);
        });
    });
}

/// The gate+up kernel's split tile `t` (output tile `tile`), in its last block to finish (the
/// consumer warps): gate's and up's partials summed in split order, bf16 `act(g)·u` out.
#[inline(always)]
unsafe fn reduce_gate_up(p: &GemmParams, tile: (u32, u32), t: u32) {
    let ws = (p.ws as *const f32).add((t * p.splits * 2 * TILE_ELEMS) as usize);
    let quads = GEMM_WG_ROWS / 4;
    let mut i = thread_x();
    while i < TILE_ELEMS / 4 {
        let (tl, rl) = (i / quads, 4 * (i % quads));
        let (tok, row) = (tile.1 * GEMM_WG_TOKENS + tl, tile.0 * GEMM_WG_ROWS + rl);
        if row < p.n && tok < p.tokens {
            let part = |pj: u32| {
                move |s: u32| {
                    let at = (s * 2 + pj) * TILE_ELEMS + tl * GEMM_WG_ROWS + rl;
                    ld_cg_v4_f32(ws.add(at as usize))
                }
            };
            let (g, u) = (sum_splits(p.splits, part(0)), sum_splits(p.splits, part(1)));
            let y: [f32; 4] = core::array::from_fn(|j| act_mul(p, g[j], u[j]));
            let out = (p.out as *mut u8).add(((tok * p.n + row) * 2) as usize);
            st_global_v2(out, [pack_bf16x2(y[0], y[1]), pack_bf16x2(y[2], y[3])]);
        }
        i += 32 * CONSUMER_WARPS;
    }
}

/// Defines persistent GEMM entry points: `name: Format, DUAL, SPLIT, PAIR;` each runs
/// [`bulk_gemm`] with those parameters and its own parameter block's tensor map.
macro_rules! bulk_entries {
    ($($(#[$doc:meta])* $name:ident: $f:ty, $dual:literal, $split:literal, $pair:literal;)*) => {$(
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(p: GemmParams) {
            bulk_gemm::<$f, $dual, $split, $pair>(
                &p,
                crate::param_block_address!($name, core::mem::offset_of!(GemmParams, xmap)),
            )
        }
    )*};
}
pub(super) use bulk_entries;

bulk_entries! {
    /// Prefill gate+up over the BF16 overlay with the activation fused: bf16 `act(g)·u` out.
    /// Block: [`crate::params::GEMM_BULK_THREADS`] threads, [`GEMM_WG_ROWS`] rows × [`GEMM_WG_TOKENS`] tokens;
    /// shared memory [`crate::params::GEMM_BULK_SMEM_BYTES`].
    bf16_gemm_gate_up_act: Bf16Tiles, true, false, false;
    /// `bf16_gemm_gate_up_act` with K split `GemmParams::splits` ways for the tiles from
    /// `GemmParams::split_from` on: the last wave of tiles, which would leave SMs idle, runs as
    /// `splits` times as many units, each over part of K; the last block to finish such a tile
    /// sums the f32 partials of gate and up and applies the activation.
    bf16_gemm_gate_up_act_splitk: Bf16Tiles, true, true, false;
    /// Prefill single projection over the BF16 overlay: bf16 out. Block: [`crate::params::GEMM_BULK_THREADS`]
    /// threads, [`GEMM_BULK_WIDE_ROWS`] rows × [`GEMM_WG_TOKENS`] tokens; shared memory as the
    /// gate+up kernel's.
    bf16_gemm: Bf16Tiles, false, false, false;
    /// `bf16_gemm` with K split `GemmParams::splits` ways (a unit a split of a tile): f32
    /// partials in `GemmParams::ws`, summed by the last block to finish each tile.
    bf16_gemm_splitk: Bf16Tiles, false, true, false;
    /// `bf16_gemm_gate_up_act` in clusters of two blocks (declared `.reqnctapercluster 2` by the
    /// build) over pairs of token tiles, each weight chunk copied once per pair and multicast
    /// ([`crate::params::GemmShape::cluster`]); units and grid in pairs
    /// ([`crate::params::gemm_bulk_units`]).
    bf16_gemm_gate_up_act_x2: Bf16Tiles, true, false, true;
    /// `bf16_gemm_gate_up_act_splitk` in cluster pairs, as `bf16_gemm_gate_up_act_x2`.
    bf16_gemm_gate_up_act_splitk_x2: Bf16Tiles, true, true, true;
    /// `bf16_gemm` in cluster pairs, as `bf16_gemm_gate_up_act_x2`.
    bf16_gemm_x2: Bf16Tiles, false, false, true;
    /// `bf16_gemm_splitk` in cluster pairs, as `bf16_gemm_gate_up_act_x2`.
    bf16_gemm_splitk_x2: Bf16Tiles, false, true, true;
}
