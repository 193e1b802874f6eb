//! Launch parameter blocks: one `#[repr(C)]` struct per kernel family, passed by value as the
//! kernel's only parameter. The host builds them and ships their bytes; the CPU reference reads
//! the same bytes back, so host, GPU and reference agree on every field by construction.

/// Marker for parameter blocks: `#[repr(C)]`, only `u64`/`u32`/`f32` fields, no padding bytes.
///
/// # Safety
/// Implementors must have no padding and no invalid bit patterns.
pub unsafe trait ParamBlock: Copy + Sized {
    /// The block's bytes, as the kernel receives them.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: the trait's contract (repr(C), no padding) makes every byte initialized.
        unsafe {
            core::slice::from_raw_parts(
                self as *const Self as *const u8,
                core::mem::size_of::<Self>(),
            )
        }
    }
    /// Reads a block back from bytes; `None` when the length is wrong.
    fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() != core::mem::size_of::<Self>() {
            return None;
        }
        // SAFETY: the length matches and every bit pattern is valid for these field types.
        Some(unsafe { core::ptr::read_unaligned(b.as_ptr() as *const Self) })
    }
}

/// How a GEMV kernel reads its activations (the B operand) for `m` tokens.
pub mod source {
    /// bf16 `[m][k]` (the layer input).
    pub const BF16: u32 = 0;
    /// f32 `[m][k]` (an activated intermediate, e.g. gelu_mul's output).
    pub const F32: u32 = 1;
    /// silu(g) * u from two f32 `[m][k]` buffers, computed while staging (SiLU-fused down).
    pub const SILU_F32: u32 = 2;
    /// Already staged by an earlier launch: `act0` holds f16 values in B-fragment order
    /// (`[chunk][m][PACK_TOKEN_WORDS]` words, each token scaled by a power of two per K split)
    /// and `act1` the f32 inverse scales `[split][PACK_SCALE_STRIDE]`; the kernel reads its B
    /// fragments straight from global memory, with no staging and no shared memory for them.
    /// The launch must use the K splits the pack was made for.
    pub const PACKED: u32 = 3;
}

/// [`GemvParams::flags`] bit: the launch is the programmatic dependent of the kernel that
/// writes its input (Hopper's programmatic dependent launch), so the kernel issues its first
/// weight loads, then waits for that kernel (`griddepcontrol.wait`), then reads activations.
/// Every GEMV lets its dependent start after its main loop (`griddepcontrol.launch_dependents`),
/// so the next kernel's start-up and weight loads overlap this one's tail.
pub const GEMV_WAIT_INPUT: u32 = 1;

/// 32-bit words one token's 64 packed f16 values of a chunk take in a [`source::PACKED`]
/// buffer: lane quad `tq` of the reading warp finds its 8 B-fragment words at `8·tq`.
pub const PACK_TOKEN_WORDS: u32 = 32;
/// f32 inverse scales per K split in a [`source::PACKED`] scale buffer (one per token slot).
pub const PACK_SCALE_STRIDE: u32 = 8;

/// Bytes of a [`source::PACKED`] activation buffer for `m` tokens of `k` columns.
pub const fn pack_bytes(m: u32, k: u32) -> u32 {
    m * k * 2
}

/// Bytes of a [`source::PACKED`] scale buffer for `splits` K splits.
pub const fn pack_scale_bytes(splits: u32) -> u32 {
    splits * PACK_SCALE_STRIDE * 4
}

/// Parameters of the NVFP4 tiled GEMV family (`gemv_nvfp4_*`): `out[t][row] = sum_k W[row][k] *
/// act[t][k]` for `t < m`, one or two projections (`w1 != 0`: the dual gate+up kernel, both
/// reading the same activations). Grid: (`ceil(n / 128)`, `splits`); block: 256 threads; dynamic
/// shared memory: [`gemv_smem_bytes`]. With `splits > 1` each split writes f32 partials to `ws`
/// (`[splits][proj][m][n]`) and the last block of a row group (counted in `counters`, which it
/// resets) sums them in split order, so results do not depend on scheduling.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GemvParams {
    /// Tiled codes of projection 0.
    pub w0: u64,
    /// Tiled scales of projection 0.
    pub s0: u64,
    /// Tiled codes of projection 1 (0: single projection).
    pub w1: u64,
    /// Tiled scales of projection 1.
    pub s1: u64,
    /// Activation buffer (bf16 or f32, see `source`).
    pub act0: u64,
    /// Second activation buffer (`u` for [`source::SILU_F32`]), else 0.
    pub act1: u64,
    /// Output of projection 0: f32 `[m][n]` when `out_bf16 == 0`, else bf16.
    pub out0: u64,
    /// Output of projection 1.
    pub out1: u64,
    /// Split-K workspace, f32 `[splits][2][m][n]` (unused when `splits == 1`).
    pub ws: u64,
    /// One u32 per 128-row group, zero between launches (unused when `splits == 1`).
    pub counters: u64,
    /// Global scale of projection 0.
    pub gscale0: f32,
    /// Global scale of projection 1.
    pub gscale1: f32,
    /// Output rows (multiple of 16).
    pub n: u32,
    /// Reduction length (multiple of 64).
    pub k: u32,
    /// Tokens, 1..=8.
    pub m: u32,
    /// Split-K factor (>= 1).
    pub splits: u32,
    /// 64-column chunks per split (the last split may have fewer).
    pub chunks_per_split: u32,
    /// One of `source::*`.
    pub source: u32,
    /// 1: outputs are bf16; 0: f32.
    pub out_bf16: u32,
    /// [`GEMV_WAIT_INPUT`] or 0.
    pub flags: u32,
    /// LoRA up-projection `B` of projection 0: bf16 `[n][lora_rank]`, row-major (0: none).
    pub lora_b0: u64,
    /// LoRA `B` of projection 1 (the dual kernel's second projection).
    pub lora_b1: u64,
    /// LoRA shrink results `scale·A·x`: f32 `[proj][m][lora_rank]` (projection 1 at
    /// `m·lora_rank` elements), made by `lora_shrink` ([`LoraShrinkParams`]).
    pub lora_ax: u64,
    /// Padded LoRA rank (a multiple of [`LORA_RANK_STEP`]); 0: no LoRA delta. When set, the
    /// last K split's epilogue adds `Σ_r B[row][r]·ax[t][r]` to its result before writing.
    pub lora_rank: u32,
    /// Padding to a multiple of 8 bytes.
    pub _pad_lora: u32,
    /// Where the blocks of row group 0 also write their staged activations as a
    /// [`source::PACKED`] buffer (`[chunk][m][PACK_TOKEN_WORDS]` words), so a later launch over
    /// the same input and K splits skips the staging; 0: not written. Single-projection
    /// kernels with a staged source only.
    pub pack_out: u64,
    /// The inverse scales of `pack_out`, f32 `[split][PACK_SCALE_STRIDE]`.
    pub pack_scales: u64,
}

// SAFETY: repr(C), 10 u64, 10 four-byte fields, 3 u64, 2 four-byte fields, 2 u64: no padding
// (the second u64 run starts at byte 120, the third at 152), all bit patterns valid.
unsafe impl ParamBlock for GemvParams {}

/// Rows per block of the GEMV family (8 warps × one 16-row tile).
pub const GEMV_ROWS_PER_BLOCK: u32 = 128;
/// Threads per block of the GEMV family.
pub const GEMV_THREADS: u32 = 256;

/// Bytes at the start of a GEMV block's shared memory: per-token scales (32 at 0), the
/// last-block flag (at 32), per-token per-warp reduction slots (64 f32 at 256).
pub const GEMV_SMEM_HEADER: u32 = 512;

/// Dynamic shared memory of one GEMV block: the header and the staged f16 activations of one
/// split (`m × chunks × 64` halves, B-fragment order).
pub const fn gemv_smem_bytes(m: u32, chunks_per_split: u32) -> u32 {
    GEMV_SMEM_HEADER + m * chunks_per_split * GEMV_SMEM_PER_TOKEN_CHUNK
}

/// 32-bit words one token's 64 staged f16 values of a chunk take: 32, padded to 36 so that the
/// 8 lanes of a quarter-warp reading B fragments (16-byte loads of 2 tokens × 4 column pairs)
/// hit distinct banks.
pub const GEMV_TOKEN_WORDS: u32 = 36;

/// Shared-memory bytes per token per 64-column chunk (64 f16 values, padded).
pub const GEMV_SMEM_PER_TOKEN_CHUNK: u32 = GEMV_TOKEN_WORDS * 4;

/// Parameters of the elementwise activation kernel (`gelu_mul`):
/// `out[i] = act(g[i]) * u[i]` for `i < len`, f32 in and out. Grid: `ceil(len / 1024)`,
/// block: 256 threads, 4 elements per thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ElementwiseParams {
    /// Gate input, f32.
    pub g: u64,
    /// Up input, f32.
    pub u: u64,
    /// Output, f32.
    pub out: u64,
    /// Number of elements.
    pub len: u32,
    /// Padding.
    pub _pad: u32,
}

// SAFETY: repr(C), 3 u64 + 2 u32: no padding.
unsafe impl ParamBlock for ElementwiseParams {}

/// Parameters of the activation packers (`silu_mul_pack`, `gelu_mul_pack`): `a = act(g)·u` over `m`
/// tokens of `k` f32 columns, written as a [`source::PACKED`] buffer for a GEMV launch with
/// `chunks_per_split` chunks per K split (each token scaled per split by a power of two that
/// brings its largest magnitude into [2^14, 2^15)), and as f32 `[m][k]` to `out` when it is
/// not 0 (LoRA's shrink of down reads it). Grid: (`ceil(k / 64 / chunks_per_split)`, `m`),
/// block: [`PACK_THREADS`], dynamic shared memory [`PACK_SMEM_BYTES`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ActPackParams {
    /// Gate input, f32 `[m][k]`.
    pub g: u64,
    /// Up input, f32 `[m][k]`.
    pub u: u64,
    /// f32 output `[m][k]` (0: not written).
    pub out: u64,
    /// Packed output (see [`source::PACKED`]).
    pub packed: u64,
    /// Inverse scales out, f32 `[split][PACK_SCALE_STRIDE]`.
    pub scales: u64,
    /// Columns per token (multiple of 64).
    pub k: u32,
    /// Tokens, 1..=8.
    pub m: u32,
    /// 64-column chunks per K split of the consuming GEMV.
    pub chunks_per_split: u32,
    /// Padding.
    pub _pad: u32,
}

// SAFETY: repr(C), 5 u64 + 4 u32: no padding.
unsafe impl ParamBlock for ActPackParams {}

/// Threads per block of the activation packers.
pub const PACK_THREADS: u32 = 256;
/// Dynamic shared memory of an activation packer block (one f32 per warp).
pub const PACK_SMEM_BYTES: u32 = PACK_THREADS / 32 * 4;

/// Parameters of the NVFP4 prefill GEMM family (`gemm_nvfp4_t_*`): `Y[t][row] = Σ_k W[row][k] ·
/// X[t][k]` for all `tokens`, bf16 X in, bf16 Y out, f32 accumulation on `wgmma` (bf16). With
/// `w1 != 0` (gate+up) the epilogue writes `act(gate)·up` instead (`act`: 1 SiLU, 2 GELU-tanh).
/// Grid, block and shared memory: [`gemm_shape`]. Weights in the tiled
/// layout (`formats::nvfp4`). A single-projection launch without LoRA may split K
/// (`splits > 1`): each split writes its scaled f32 partial to `ws`, and the last block of a
/// tile to finish (counted in `counters`) sums the partials in split order and writes the bf16
/// output, so the result does not depend on the order the blocks run in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GemmParams {
    /// The kernels of [`GemmShape::x_map`] (the BF16 GEMMs) only: `x` as their TMA copies read
    /// it, boxes of [`GEMM_WG_TOKENS`] tokens × 64 columns with the 128-byte swizzle (the host's
    /// `GpuBackend::encode_tile_map`); all zeros for the other kernels.
    pub xmap: TileMap,
    /// Tiled codes of projection 0.
    pub w0: u64,
    /// Tiled scales of projection 0.
    pub s0: u64,
    /// Tiled codes of projection 1 (0: single projection).
    pub w1: u64,
    /// Tiled scales of projection 1.
    pub s1: u64,
    /// Input, bf16 `[tokens][k]`.
    pub x: u64,
    /// Output, bf16 `[tokens][n]`.
    pub out: u64,
    /// Global scale of projection 0.
    pub gscale0: f32,
    /// Global scale of projection 1.
    pub gscale1: f32,
    /// Output rows (multiple of 16).
    pub n: u32,
    /// Reduction length (multiple of 64).
    pub k: u32,
    /// Tokens (≥ 1).
    pub tokens: u32,
    /// Epilogue activation for the dual kernel: 1 SiLU, 2 GELU-tanh.
    pub act: u32,
    /// LoRA `B` of projection 0: bf16 `[n][lora_rank]`, row-major (0: none).
    pub lora_b0: u64,
    /// LoRA `B` of projection 1.
    pub lora_b1: u64,
    /// LoRA shrink results `scale·A·x`: f32 `[proj][tokens][lora_rank]`.
    pub lora_ax: u64,
    /// Padded LoRA rank (a multiple of [`LORA_RANK_STEP`]); 0: none. When set, the epilogue
    /// adds `Σ_r B[row][r]·ax[t][r]` to each projection (before the dual kernel's activation).
    pub lora_rank: u32,
    /// K splits (0 or 1: none; the LoRA kernels never split; of the gate+up kernels only
    /// `bf16_gemm_gate_up_act_splitk`, and only its tiles from `split_from` on).
    pub splits: u32,
    /// 64-column chunks per K split (with `splits > 1`).
    pub chunks_per_split: u32,
    /// The gate+up split-K kernel: the first tile (block `block_y · grid_x + block_x`) whose K
    /// is split (the tiles of the grid's last, partial wave); the tiles before it run whole in
    /// the blocks of `blockIdx.z = 0` (the other blocks of theirs return at once), or, in the
    /// persistent BF16 kernel, as one unit each ([`gemm_bulk_units`]). 0 for the
    /// single-projection kernels, which split every tile.
    pub split_from: u32,
    /// Split-K partials: single projection f32 `[split][tokens][n]`; gate+up f32
    /// `[tile − split_from][split][projection][token 128][row 128]` (with `splits > 1`).
    pub ws: u64,
    /// Split-K arrival counters, u32 per split tile: single projection per (row block, token
    /// block), `[block_y][block_x]`; gate+up per tile from `split_from` on. Zero before the
    /// launch, and zero again after it (the last block of a tile resets its own).
    pub counters: u64,
    /// The FP8-weight persistent GEMMs only: f32 `[tokens]`, each token's inverse activation
    /// scale; `x` then holds the quantized activations, E4M3 `[tokens][k]` codes
    /// (`w8a8_gemm*`, `formats::e4m3::act_scale`) or f16 `[tokens][k]` values (`w8a16_gemm*`,
    /// `formats::e4m3::act_scale_f16`).
    pub x_scales: u64,
}

// SAFETY: repr(C), the 128-byte map, 6 u64, 6 four-byte fields, 3 u64, 4 four-byte fields,
// 3 u64: no padding (the u64 runs start at bytes 128, 200 and 240).
unsafe impl ParamBlock for GemmParams {}
const _: () = assert!(
    core::mem::size_of::<GemmParams>() == 264 && core::mem::offset_of!(GemmParams, w0) == 128
);

/// A TMA tensor map (the driver's `CUtensorMap`): 128 opaque bytes, read by
/// `cp.async.bulk.tensor` from the kernel's parameter block, where it must lie aligned as the
/// driver's type is (64 bytes on CUDA 12, 128 on CUDA 13): it is the block's first field, and
/// the build declares the kernels' blocks `.align 128` (`PtxBuilder::param_align`; Rust's
/// kernel ABI declares at most 16). Made on the host by `GpuBackend::encode_tile_map` (the CPU
/// backend writes its own description into the same bytes); all zeros when a launch has none.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TileMap(pub [u64; 16]);

/// Rows per block of the Hopper prefill GEMMs ([`GEMM_WG_FAMILIES`] and the persistent
/// GEMMs): two warpgroups of 64 rows, one `wgmma.m64n128k16` each per 16 columns.
pub const GEMM_WG_ROWS: u32 = 128;
/// Tokens per block of the Hopper prefill GEMMs (the N of one `m64n128k16`).
pub const GEMM_WG_TOKENS: u32 = 128;
/// Pipeline stages of the Hopper prefill GEMMs: 64-column chunks of activations and weights in
/// flight in shared memory (`cp.async`). The first `GEMM_WG_STAGES − 1` are copied before the
/// loop; then opening chunk `i` copies chunk `i + GEMM_WG_STAGES − 2` into the stage of chunk
/// `i − 2`, whose products are done.
pub const GEMM_WG_STAGES: u32 = 4;

/// Bytes of one stage of a Hopper prefill GEMM over tiles of `code_bytes` + `scale_bytes`: the
/// activation chunk (tokens × 128 bytes, 128-byte swizzle) then, per projection, the codes and
/// then the scales of the block's 8 tiles; rounded up to 1024 bytes (the swizzle's alignment).
pub const fn gemm_wg_stage_bytes(dual: bool, code_bytes: u32, scale_bytes: u32) -> u32 {
    let proj = if dual { 2 } else { 1 };
    (GEMM_WG_TOKENS * 128 + proj * 8 * (code_bytes + scale_bytes)).div_ceil(1024) * 1024
}

/// Dynamic shared memory of a Hopper prefill GEMM block: the stages plus 1024 bytes to align
/// the first.
pub const fn gemm_wg_smem_bytes(dual: bool, code_bytes: u32, scale_bytes: u32) -> u32 {
    GEMM_WG_STAGES * gemm_wg_stage_bytes(dual, code_bytes, scale_bytes) + 1024
}

/// The prefill GEMM families of `kernels::wgemm` (`wgmma`, sm_90a; BF16's GEMM is
/// `kernels::bulk_gemm`, [`GEMM_BULK_SMEM_BYTES`]), by entry-point prefix, with their tiles'
/// code and scale bytes.
pub const GEMM_WG_FAMILIES: [(&str, u32, u32); 3] = {
    use crate::formats::nvfp4::{TILE_CODE_BYTES, TILE_SCALE_BYTES};
    use crate::formats::tiles::TileFormat;
    const fn f(prefix: &'static str, t: TileFormat) -> (&'static str, u32, u32) {
        (prefix, t.code_bytes() as u32, t.scale_bytes() as u32)
    }
    let nvfp4 = (TILE_CODE_BYTES as u32, TILE_SCALE_BYTES as u32);
    [
        ("gemm_nvfp4_t_", nvfp4.0, nvfp4.1),
        f("q2_0_gemm", TileFormat::Q2),
        f("q4k_gemm", TileFormat::Q4k),
    ]
};

/// Threads of a BF16 prefill GEMM block (`kernels::bulk_gemm`): two consumer warpgroups that
/// issue the `wgmma`s and one producer warpgroup that fills the stages.
pub const GEMM_BULK_THREADS: u32 = 384;

/// Bytes of the BF16 prefill GEMM's `mbarrier`s after its stages: a full and an empty barrier
/// (8 bytes each) for up to 8 stages.
pub const GEMM_BULK_BARRIER_BYTES: u32 = 128;

/// Rows per block of the BF16 single-projection prefill GEMMs (`bf16_gemm`, `bf16_gemm_splitk`):
/// a stage carries 256 rows of weights for 128 tokens (half the activation bytes a product of
/// a 128-row block), as the gate+up kernel's carries gate's and up's 128; each consumer
/// warpgroup multiplies its 64 tokens with all 256 rows (one `wgmma.m64n256k16` a step).
pub const GEMM_BULK_WIDE_ROWS: u32 = 256;

// One wide block fills an SM's shared memory (228 KiB), so a split-K plan of it (`splits ×
// blocks ≤ sm_count`) needs no more workspace than one of two 128 × 128 blocks per SM.
const _: () = assert!(2 * GEMM_BULK_SMEM_BYTES > 228 * 1024);

/// Pipeline stages of a BF16 prefill GEMM (`kernels::bulk_gemm`): as many as fit one block per
/// SM (4 of 48 KiB: 128 tokens of activations and 16 weight tiles, for gate+up and the wide
/// single projection alike).
pub const GEMM_BULK_STAGES: u32 = 4;

/// Dynamic shared memory of a BF16 prefill GEMM block: its stages (as
/// [`gemm_wg_stage_bytes`] of two projections' bf16 tiles), 1024 bytes to align the first,
/// then the barriers.
pub const GEMM_BULK_SMEM_BYTES: u32 = {
    use crate::formats::tiles::TileFormat;
    let stage = gemm_wg_stage_bytes(true, TileFormat::Bf16.code_bytes() as u32, 0);
    GEMM_BULK_STAGES * stage + 1024 + GEMM_BULK_BARRIER_BYTES
};

/// Row blocks per group of the block order of the persistent prefill GEMMs (BF16 and FP8 ×
/// FP8, `kernels::bulk_gemm`): the blocks resident at one time walk a group's row blocks, then
/// the next token block, so they share a few weight slabs. With both operands handed to the
/// tensor cores from shared memory, Nsight Compute put `bf16_gemm_gate_up_act` (8B, N = 4096,
/// row blocks fastest) at 88% of DRAM bandwidth, the weights read once per token block; an FP8
/// × FP8 GEMM of 2026-12-04 read 3.27 GB from DRAM for 8B gate+up at N = 4096 in that order,
/// 28× its 117 MB of weights.
pub const GEMM_WG_GROUP: u32 = 8;

/// Bytes of one stage of an FP8 × FP8 prefill GEMM (`kernels::w8a8`): 128 columns of K, i.e.
/// the activations (128 tokens × 128 E4M3, 128-byte swizzle) and per 128-row slice (gate's and
/// up's, or the single projection's one) its 8 row tiles' two FP8 tiles each (2 KiB a row
/// tile, as they lie in global memory).
pub const fn w8a8_stage_bytes(dual: bool) -> u32 {
    use crate::formats::tiles::TileFormat;
    let slices = if dual { 2 } else { 1 };
    GEMM_WG_TOKENS * 128 + slices * 8 * 2 * TileFormat::Fp8.code_bytes() as u32
}

/// Bytes of one stage of an FP8 × bf16 prefill GEMM (`kernels::w8a8`, `w8a16_gemm*`): 64
/// columns of K, i.e. the activations (128 tokens × 64 f16, 128-byte swizzle) and per 128-row
/// slice its 8 row tiles' one FP8 tile each (1 KiB a row tile).
pub const fn w8a16_stage_bytes(dual: bool) -> u32 {
    use crate::formats::tiles::TileFormat;
    let slices = if dual { 2 } else { 1 };
    GEMM_WG_TOKENS * 128 + slices * 8 * TileFormat::Fp8.code_bytes() as u32
}

/// Pipeline stages of an FP8 × bf16 prefill GEMM: gate+up 6 of 32 KiB, the single projection
/// 7 of 24 KiB (the barriers hold up to 7).
pub const fn w8a16_stages(dual: bool) -> u32 {
    if dual {
        6
    } else {
        7
    }
}

/// Dynamic shared memory of an FP8 × bf16 prefill GEMM block, as [`w8a8_smem_bytes`].
pub const fn w8a16_smem_bytes(dual: bool) -> u32 {
    w8a16_stages(dual) * w8a16_stage_bytes(dual) + 1024 + GEMM_BULK_BARRIER_BYTES
}

/// Pipeline stages of an FP8 × FP8 prefill GEMM: as many as fit one block per SM (gate+up 4 of
/// 48 KiB, the single projection 6 of 32 KiB); the barriers hold up to 7.
pub const fn w8a8_stages(dual: bool) -> u32 {
    if dual {
        4
    } else {
        6
    }
}

/// Dynamic shared memory of an FP8 × FP8 prefill GEMM block: the stages, 1024 bytes to align
/// the first, then the barriers (as [`GEMM_BULK_SMEM_BYTES`]).
pub const fn w8a8_smem_bytes(dual: bool) -> u32 {
    w8a8_stages(dual) * w8a8_stage_bytes(dual) + 1024 + GEMM_BULK_BARRIER_BYTES
}

/// How a prefill GEMM entry point is launched: rows and tokens per block (grid
/// `(ceil(n / rows), ceil(tokens / tokens), splits)`), threads per block and its dynamic shared
/// memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmShape {
    /// Output rows per block.
    pub rows: u32,
    /// Tokens per block.
    pub tokens: u32,
    /// Threads per block (256, or [`GEMM_BULK_THREADS`] for the BF16 GEMMs).
    pub threads: u32,
    /// Dynamic shared memory, bytes.
    pub smem: u32,
    /// A persistent kernel (the BF16 GEMMs): grid `(min(units, SMs), 1, 1)`, each block
    /// running units `blockIdx.x, + gridDim.x, …` ([`gemm_bulk_units`], [`gemm_grid`]).
    pub persistent: bool,
    /// The kernel reads its activations through [`GemmParams::xmap`] (TMA), not `x`.
    pub x_map: bool,
    /// Blocks per cluster: 2 for the BF16 GEMMs' `_x2` entry points (a pair of blocks shares
    /// each weight chunk, each copying half and multicasting it to both, over two adjacent
    /// token tiles: [`gemm_bulk_units`]' units are then such pairs), else 1.
    pub cluster: u32,
    /// Launched as the programmatic dependent of the kernel before it (the FP8-weight GEMMs:
    /// they set up their barriers under their quantizer's tail, then wait for it).
    pub dependent: bool,
}

/// Units of work of a persistent prefill GEMM launch (`kernels::bulk_gemm`: BF16 and FP8 × FP8)
/// of `rows`-row tiles (`dual`: gate+up), 128 tokens a tile, `cluster` (1 or 2) blocks a unit:
/// its tiles (with `cluster` 2, pairs of tiles of adjacent token blocks, [`gemm_pair_tiles`]);
/// with K split `p.splits` ways, the gate+up kernel's whole tiles `0 .. split_from` plus
/// `splits` units a tile after (the tail split), the single projection's `splits` units a tile.
#[inline(always)]
pub fn gemm_bulk_units(dual: bool, rows: u32, cluster: u32, p: &GemmParams) -> u32 {
    let tiles = gemm_pair_tiles(rows, cluster, p.n, p.tokens);
    let splits = p.splits.max(1);
    if splits == 1 {
        tiles
    } else if dual {
        p.split_from + tiles.saturating_sub(p.split_from) * splits
    } else {
        tiles * splits
    }
}

/// Output tiles of `rows` rows × 128 tokens of a persistent prefill GEMM over `n` rows and
/// `tokens` tokens, counted in groups of `cluster` tiles of adjacent token blocks (the last
/// group of an odd count has one tile; its partner computes nothing it stores).
#[inline(always)]
pub fn gemm_pair_tiles(rows: u32, cluster: u32, n: u32, tokens: u32) -> u32 {
    n.div_ceil(rows) * tokens.div_ceil(GEMM_WG_TOKENS).div_ceil(cluster.max(1))
}

/// The grid of a prefill GEMM launch of `shape` (`dual`: gate+up) with parameters `p` on a
/// GPU of `sm_count` SMs: `(min(units, sm_count), 1, 1)` for a persistent kernel (one block
/// fills an SM), else `(row blocks, token blocks, splits)`. Host side only.
#[cfg(not(target_arch = "nvptx64"))]
pub fn gemm_grid(shape: &GemmShape, dual: bool, p: &GemmParams, sm_count: u32) -> (u32, u32, u32) {
    if shape.persistent {
        let c = shape.cluster.max(1);
        let groups = gemm_bulk_units(dual, shape.rows, c, p)
            .min(sm_count / c)
            .max(1);
        (c * groups, 1, 1)
    } else {
        (
            p.n.div_ceil(shape.rows),
            p.tokens.div_ceil(shape.tokens),
            p.splits.max(1),
        )
    }
}

/// The launch shape of prefill GEMM `kernel` (`dual`: gate+up); `None` for a name that is no
/// prefill GEMM. Host side only.
#[cfg(not(target_arch = "nvptx64"))]
pub fn gemm_shape(kernel: &str, dual: bool) -> Option<GemmShape> {
    let cluster = if kernel.ends_with(GEMM_PAIR_SUFFIX) {
        2
    } else {
        1
    };
    let fp8 = if kernel.starts_with("w8a8_gemm") {
        Some(w8a8_smem_bytes(dual))
    } else if kernel.starts_with("w8a16_gemm") {
        Some(w8a16_smem_bytes(dual))
    } else {
        None
    };
    if let Some(smem) = fp8 {
        return Some(GemmShape {
            rows: GEMM_WG_ROWS,
            tokens: GEMM_WG_TOKENS,
            threads: GEMM_BULK_THREADS,
            smem,
            persistent: true,
            x_map: true,
            cluster,
            dependent: true,
        });
    }
    if kernel.starts_with("bf16_gemm") {
        return Some(GemmShape {
            rows: if dual {
                GEMM_WG_ROWS
            } else {
                GEMM_BULK_WIDE_ROWS
            },
            tokens: GEMM_WG_TOKENS,
            threads: GEMM_BULK_THREADS,
            smem: GEMM_BULK_SMEM_BYTES,
            persistent: true,
            x_map: true,
            cluster,
            dependent: false,
        });
    }
    let &(_, cb, sb) = GEMM_WG_FAMILIES
        .iter()
        .find(|(prefix, ..)| kernel.starts_with(prefix))?;
    Some(GemmShape {
        rows: GEMM_WG_ROWS,
        tokens: GEMM_WG_TOKENS,
        threads: 256,
        smem: gemm_wg_smem_bytes(dual, cb, sb),
        persistent: false,
        x_map: false,
        cluster: 1,
        dependent: false,
    })
}

/// The suffix of the BF16 GEMMs' cluster-pair entry points (`bf16_gemm_x2`, …: two blocks a
/// cluster sharing each weight chunk by multicast; [`GemmShape::cluster`]).
pub const GEMM_PAIR_SUFFIX: &str = "_x2";

/// LoRA ranks are padded on the device to a multiple of this (zero rows of `A`, zero columns
/// of `B`): one `mma.m16n8k16` K step of the expansion, and the rank rows of one shrink block.
pub const LORA_RANK_STEP: u32 = 16;
/// The largest LoRA rank the kernels take.
pub const LORA_MAX_RANK: u32 = 256;
/// Columns one `lora_shrink` step stages and multiplies (each lane: two 16-byte vectors of `A`
/// per rank row).
pub const LORA_SHRINK_STEP: u32 = 512;
/// Tokens one `lora_shrink` block carries.
pub const LORA_SHRINK_TOKENS: u32 = 8;
/// Threads of a `lora_shrink` block (8 warps, 2 rank rows each: [`LORA_RANK_STEP`] rows).
pub const LORA_SHRINK_THREADS: u32 = 256;
/// Most K-splits × rank groups of one `lora_shrink` launch (bounds its workspace).
pub const LORA_SHRINK_MAX_SPLIT_GROUPS: u32 = 128;
/// Dynamic shared memory of a `lora_shrink` block: the staged f32 activations
/// (`LORA_SHRINK_TOKENS × LORA_SHRINK_STEP`) and a 16-byte flag slot after them.
pub const LORA_SHRINK_SMEM: u32 = LORA_SHRINK_TOKENS * LORA_SHRINK_STEP * 4 + 16;

/// Parameters of `lora_shrink`: `out[p][t][r] = scale · Σ_k A_p[r][k] · act[t][k]` for one or
/// two projections `p` (`a1 != 0`: both read the same activations), `tokens` rows and the
/// padded rank `rank` (a multiple of [`LORA_RANK_STEP`]). `A_p`: bf16 `[rank][k]`, row-major.
/// Activations as [`GemvParams`] reads them (`source`). Grid: (`splits`, `rank / 16`,
/// `projs · ceil(tokens / 8)`); block: [`LORA_SHRINK_THREADS`]; dynamic shared memory
/// [`LORA_SHRINK_SMEM`]. With `splits > 1` (only for `tokens ≤ 8`) each split writes f32
/// partials to `ws` (`[splits][projs][tokens][rank]`) and the last block of each (projection,
/// rank group), counted in `counters` (`[projs][rank / 16]`, zero between launches, reset by
/// that block), sums them in split order: deterministic.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoraShrinkParams {
    /// `A` of projection 0, bf16 `[rank][k]`.
    pub a0: u64,
    /// `A` of projection 1 (0: one projection).
    pub a1: u64,
    /// Activation buffer (see `source`).
    pub act0: u64,
    /// Second activation buffer (`u` for [`source::SILU_F32`]), else 0.
    pub act1: u64,
    /// Output, f32 `[projs][tokens][rank]`.
    pub out: u64,
    /// Split-K partials, f32 `[splits][projs][tokens][rank]` (unused when `splits == 1`).
    pub ws: u64,
    /// Split counters, u32 `[projs][rank / 16]` (unused when `splits == 1`).
    pub counters: u64,
    /// `alpha / rank` (the unpadded rank).
    pub scale: f32,
    /// Reduction length (multiple of 8).
    pub k: u32,
    /// Tokens (≥ 1).
    pub tokens: u32,
    /// Padded rank (multiple of 16, ≤ [`LORA_MAX_RANK`]).
    pub rank: u32,
    /// K splits (grid.x).
    pub splits: u32,
    /// Columns per split (a multiple of [`LORA_SHRINK_STEP`]; the last split may have fewer).
    pub cols_per_split: u32,
    /// One of `source::*`.
    pub source: u32,
    /// Padding.
    pub _pad: u32,
}

// SAFETY: repr(C), 7 u64 then 8 four-byte fields: no padding.
unsafe impl ParamBlock for LoraShrinkParams {}

/// Parameters of the Q4_K MMQ GEMM (`q4k_mmq_gate_up_act`, `q4k_mmq`): `Y[t][row] = Σ_k W[row][k]
/// · X[t][k]` with W in the MMQ layout (`formats::q4k_mmq`: 16×256 tiles of fragment-ordered
/// 4-bit codes plus ggml block headers) and X quantized per 32 values (`quantize_q8_32`: int8
/// codes, f32 `(d, s)` pairs). Integer `m16n8k32` products per sub-block, scaled in f32 by
/// `d·sc·dx`, minus `dmin·m·s`. With `w1 != 0` (gate+up) the epilogue writes `act(gate)·up`
/// (`act`: 1 SiLU, 2 GELU-tanh). bf16 out `[tokens][n]`. Grid: (`ceil(n / mmq_rows_per_block(dual))`,
/// `ceil(tokens / MMQ_TOKENS_PER_BLOCK)`); block 256 threads; shared memory [`MMQ_SMEM_BYTES`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MmqParams {
    /// MMQ codes of projection 0.
    pub w0: u64,
    /// MMQ block headers of projection 0.
    pub h0: u64,
    /// MMQ codes of projection 1 (0: single projection).
    pub w1: u64,
    /// MMQ block headers of projection 1.
    pub h1: u64,
    /// Activation codes, int8 `[tokens][k]` (each 32-block permuted, `q4k_mmq::q8_pos`).
    pub xq: u64,
    /// Activation `(d, s)` f32 pairs, `[tokens][k / 32]`.
    pub xd: u64,
    /// Output, bf16 `[tokens][n]`.
    pub out: u64,
    /// Output rows (multiple of 16).
    pub n: u32,
    /// Reduction length (multiple of 256).
    pub k: u32,
    /// Tokens (≥ 1).
    pub tokens: u32,
    /// Epilogue activation of the dual kernel: 1 SiLU, 2 GELU-tanh.
    pub act: u32,
}

// SAFETY: repr(C), 7 u64 then 4 u32: no padding.
unsafe impl ParamBlock for MmqParams {}

/// Tokens per block of the MMQ GEMM (8 column fragments of 8 per warp).
pub const MMQ_TOKENS_PER_BLOCK: u32 = 64;
/// 16-row tiles per warp of the single-projection MMQ GEMM (the dual one has 1 per projection).
pub const MMQ_SINGLE_RT: u32 = 2;
/// Bytes between two tokens' staged activation codes in shared memory (256 + 32: the 8-byte
/// B-fragment loads of a half-warp hit distinct banks).
pub const MMQ_SMEM_TOKEN_STRIDE: u32 = 288;
/// Shared memory of one MMQ block: two buffers of 64 tokens' codes (256 of a super-block each,
/// padded) and `(d, s)` pairs (8 sub-blocks × 8 bytes).
pub const MMQ_SMEM_BYTES: u32 = 2 * MMQ_TOKENS_PER_BLOCK * (MMQ_SMEM_TOKEN_STRIDE + 8 * 8);

/// Rows per block of the MMQ GEMM (8 warps × 16 rows × tiles per warp).
pub const fn mmq_rows_per_block(dual: bool) -> u32 {
    8 * 16 * if dual { 1 } else { MMQ_SINGLE_RT }
}

/// Parameters of `quantize_q8_32`: bf16 `x` `[tokens][k]` → int8 codes `qs` (each 32-block
/// permuted) and f32 `(d, s)` pairs `ds` (`formats::q4k_mmq`). One thread per 32 values; grid
/// `ceil(tokens · k / 32 / 256)`, block 256 threads, no shared memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Q8Params {
    /// Input, bf16 `[tokens][k]`.
    pub x: u64,
    /// Codes out, int8 `[tokens][k]`.
    pub qs: u64,
    /// Scales and sums out, f32 `[tokens][k / 32][2]`.
    pub ds: u64,
    /// Tokens (≥ 1).
    pub tokens: u32,
    /// Values per token (multiple of 32).
    pub k: u32,
}

// SAFETY: repr(C), 3 u64 + 2 u32: no padding.
unsafe impl ParamBlock for Q8Params {}

/// Threads per block of `quantize_q8_32` and `requant_nvfp4_q4k`.
pub const Q8_THREADS: u32 = 256;

/// Parameters of `requant_nvfp4_q4k`: one NVFP4 matrix in the tiled layout (`formats::nvfp4`)
/// → Q4_K in the MMQ layout (`formats::q4k_mmq`). One thread per 32-value sub-block, the 8 of a
/// super-block in one aligned group of lanes; grid `ceil(rows · cols / 32 / 256)`, block 256
/// threads, shared memory [`REQUANT_SMEM_BYTES`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RequantParams {
    /// NVFP4 tiled codes.
    pub codes: u64,
    /// NVFP4 tiled E4M3 scales.
    pub scales: u64,
    /// MMQ codes out.
    pub dst_codes: u64,
    /// MMQ block headers out.
    pub dst_heads: u64,
    /// NVFP4 global scale.
    pub global: f32,
    /// Rows (multiple of 16).
    pub rows: u32,
    /// Columns (multiple of 256).
    pub cols: u32,
    /// Padding.
    pub _pad: u32,
}

// SAFETY: repr(C), 4 u64 + 4 four-byte fields: no padding.
unsafe impl ParamBlock for RequantParams {}

/// Shared memory of `requant_nvfp4_q4k`: 32 f32 values per thread, then an f32 (scale, min)
/// pair and a u32 of 6-bit (scale, min) per thread.
pub const REQUANT_SMEM_BYTES: u32 = Q8_THREADS * (32 * 4 + 8 + 4);

/// Parameters of the NVFP4 W4A4 MMQ gate+up GEMM (`nvfp4_mmq_gate_up_act`): `G[t][row] = Σ_k
/// W0[row][k] · X[t][k]`, `U` likewise with `W1`, out bf16 `act(G)·U` `[tokens][n]` (`act`: 1
/// SiLU, 2 GELU-tanh). W0/W1 in the W4A4 layout (`formats::nvfp4_mmq`: 16×64 tiles of
/// fragment-ordered E2M1 codes and E4M3 scales), X quantized per token to NVFP4
/// (`quantize_nvfp4_act`: int8 doubled codes, f32 factor per 16). Integer `m16n8k16` products
/// per 16-value group, scaled in f32 by `e4m3(s_w) · factor_x`, the global scales applied once
/// in the epilogue. Grid: (`ceil(n / 128)`, `ceil(tokens / MMQ_TOKENS_PER_BLOCK)`); block 256
/// threads; shared memory [`MMQ_SMEM_BYTES`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct W4a4Params {
    /// Codes of projection 0 (gate).
    pub w0: u64,
    /// E4M3 scales of projection 0.
    pub s0: u64,
    /// Codes of projection 1 (up).
    pub w1: u64,
    /// E4M3 scales of projection 1.
    pub s1: u64,
    /// Activation codes, int8 doubled E2M1 `[tokens][k]` (each 32-block permuted, `q8_pos`).
    pub xq: u64,
    /// Activation factors, f32 `[tokens][k / 16]`.
    pub xs: u64,
    /// Output, bf16 `[tokens][n]`.
    pub out: u64,
    /// Global scale of projection 0.
    pub gscale0: f32,
    /// Global scale of projection 1.
    pub gscale1: f32,
    /// Output rows (multiple of 16).
    pub n: u32,
    /// Reduction length (multiple of 256).
    pub k: u32,
    /// Tokens (≥ 1).
    pub tokens: u32,
    /// Epilogue activation: 1 SiLU, 2 GELU-tanh.
    pub act: u32,
}

// SAFETY: repr(C), 7 u64 then 6 four-byte fields: no padding.
unsafe impl ParamBlock for W4a4Params {}

/// Rows per block of the W4A4 gate+up GEMM (8 warps × one 16-row tile of each projection).
pub const W4A4_ROWS_PER_BLOCK: u32 = 128;

/// Threads per block of `quantize_nvfp4_act` (one block per token).
pub const NVFP4_ACT_THREADS: u32 = 256;
