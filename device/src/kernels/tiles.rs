//! The weight formats the tensor-core GEMV and GEMM families are generic over: how a lane loads
//! its share of one 16×64 tile and turns it into f16 `mma` A-fragments. Layouts:
//! `formats::nvfp4` (tiled) and `formats::tiles`.
use crate::dsl::*;
use crate::formats::nvfp4;
use crate::formats::tiles::TileFormat;

/// A tiled weight format, as one lane sees it.
pub trait Tiles {
    /// This lane's codes and scales of one tile.
    type Lane: Copy;
    /// A `Lane` of zeros (for tiles past the matrix).
    const ZERO: Self::Lane;
    /// The factor the f16 fragments carry besides the global scale (results are multiplied
    /// by `FACTOR · global`).
    const FACTOR: f32;
    /// Tiles one warp keeps in flight in the single-projection GEMV (bytes in flight per lane).
    const UNROLL: u32;
    /// The same for the dual gate+up GEMV, which loads two projections' tiles per chunk.
    const UNROLL_DUAL: u32 = Self::UNROLL;
    /// The factor the decode GEMV's accumulators carry ([`Tiles::chunk`]); `FACTOR` unless a
    /// format overrides `chunk`.
    const GEMV_FACTOR: f32 = Self::FACTOR;
    /// Whether the fragments are bf16 (else f16) and in the permuted K order of [`Bf16`]: the
    /// decode GEMV then stages its activations as bf16 in that order and multiplies with the
    /// bf16 `mma`.
    const BF16: bool = false;
    /// Loads this lane's share of tile `tile`.
    ///
    /// # Safety
    /// `codes`/`scales` must hold the tile.
    unsafe fn load(codes: u64, scales: u64, tile: usize) -> Self::Lane;
    /// The four f16x2 A-fragment registers of step `j` (0..4).
    fn fragments(l: &Self::Lane, j: u32) -> [u32; 4];
    /// The decode GEMV's work on one chunk: for projection 0 (and 1 when `DUAL`) the four
    /// `mma.m16n8k16` steps of its tile `l[p]` against this lane's B fragments `x` (two words
    /// per step), accumulated into `acc0` (`acc1`) (rows g, g+8 × tokens 2·tq, 2·tq+1), in units of
    /// [`Tiles::GEMV_FACTOR`]. By default one `mma` per step over [`Tiles::fragments`].
    #[inline(always)]
    fn chunk<const DUAL: bool>(
        acc0: &mut [f32; 4],
        acc1: &mut [f32; 4],
        l: &(Self::Lane, Self::Lane),
        x: &[u32; 8],
    ) {
        let steps = |acc: &mut [f32; 4], l: &Self::Lane| {
            let mut j = 0;
            while j < 4 {
                let a = Self::fragments(l, j);
                let b = [x[2 * j as usize], x[2 * j as usize + 1]];
                *acc = if Self::BF16 {
                    mma_bf16_f32(a, b, *acc)
                } else {
                    mma_f16_f32(a, b, *acc)
                };
                j += 1;
            }
        };
        steps(acc0, &l.0);
        if DUAL {
            steps(acc1, &l.1);
        }
    }
}

/// A tiled format whose tiles the Hopper GEMM ([`super::wgemm`]) stages in shared memory whole
/// (`cp.async`, 16-byte pieces) before each lane reads its share from there.
pub trait StagedTiles: Tiles {
    /// Bytes of codes per tile (a multiple of 16).
    const CODE_BYTES: u32;
    /// Bytes of scales per tile (a multiple of 16, or 4: staged in 4-byte pieces).
    const SCALE_BYTES: u32;
    /// This lane's share of the tile staged at `codes` / `scales`, as [`Tiles::load`] reads it
    /// from global memory.
    ///
    /// # Safety
    /// The tile must be staged there.
    unsafe fn load_shared(codes: Smem, scales: Smem) -> Self::Lane;
}

/// NVFP4 tiles (codes pre-positioned for `cvt.rn.f16x2.e4m3x2`, E4M3 scales per 16).
pub struct Nvfp4;
/// bf16 tiles in the canonical core-matrix layout (the BF16 overlay).
pub struct Bf16;
/// E4M3 tiles with one f16 scale per tile (the FP8 overlay).
pub struct Fp8;
/// 2-bit tiles with per-row f16 scales (the Q2_0 overlay).
pub struct Q2;
/// 4-bit tiles with per-row-sub-block f16 `(a, −b)` (native Q4_K weights).
pub struct Q4k;

impl Tiles for Nvfp4 {
    type Lane = ([u32; 4], [u32; 2]);
    const ZERO: Self::Lane = ([0; 4], [0; 2]);
    const FACTOR: f32 = 64.0;
    const UNROLL: u32 = 4;
    const UNROLL_DUAL: u32 = 3;

    #[inline(always)]
    unsafe fn load(codes: u64, scales: u64, tile: usize) -> Self::Lane {
        let (lane, g) = (lane() as usize, lane() as usize / 4);
        (
            ld_nc_v4((codes as *const u8).add(tile * nvfp4::TILE_CODE_BYTES + lane * 16)),
            ld_nc_v2((scales as *const u8).add(tile * nvfp4::TILE_SCALE_BYTES + g * 8)),
        )
    }

    #[inline(always)]
    fn fragments(l: &Self::Lane, j: u32) -> [u32; 4] {
        let w = l.0[j as usize];
        let pw = w & 0x9C9C_9C9C;
        let qw = ((w & 0x2323_2323) << 2) | ((w >> 2) & 0x1010_1010);
        // (s_lo, s_hi) of step j as f16x2; each fragment takes one half broadcast.
        let sp = e4m3x2_to_f16x2(prmt(l.1[0], l.1[1], j | ((4 + j) << 4)));
        [
            hmul2_by_lo(e4m3x2_to_f16x2(pw), sp),
            hmul2_by_hi(e4m3x2_hi_to_f16x2(pw), sp),
            hmul2_by_lo(e4m3x2_to_f16x2(qw), sp),
            hmul2_by_hi(e4m3x2_hi_to_f16x2(qw), sp),
        ]
    }
}

impl StagedTiles for Nvfp4 {
    const CODE_BYTES: u32 = nvfp4::TILE_CODE_BYTES as u32;
    const SCALE_BYTES: u32 = nvfp4::TILE_SCALE_BYTES as u32;

    #[inline(always)]
    unsafe fn load_shared(codes: Smem, scales: Smem) -> Self::Lane {
        (
            codes.add(lane() * 16).ld_v4(),
            scales.add(lane() / 4 * 8).ld_v2(),
        )
    }
}

/// The decode GEMV reads a bf16 tile with four 16-byte loads a lane: lane `4g + q` takes row
/// `g` and row `g + 8` of core matrices `q` and `4 + q` (columns `8q..8q+8` and `32+8q..40+8q`,
/// 512 contiguous bytes a warp per load). The `mma` steps take these columns in a permuted
/// order, which the staged activations follow (a dot product does not depend on the order of
/// its terms): step `j`'s registers `(r & 1 ? row g+8 : row g, columns 2(r >> 1), +1)` are
/// the lane's pairs `2(j % 2) + (r >> 1)` of its core matrix `q + 4(j / 2)`. The lane's B
/// words `2j + h` then hold the activations of columns `32(j / 2) + 8q + 4(j % 2) + 2h`, +1.
impl Tiles for Bf16 {
    type Lane = [[u32; 4]; 4];
    const ZERO: Self::Lane = [[0; 4]; 4];
    const FACTOR: f32 = 1.0;
    const UNROLL: u32 = 2;
    const UNROLL_DUAL: u32 = 1;
    const BF16: bool = true;

    #[inline(always)]
    unsafe fn load(codes: u64, _scales: u64, tile: usize) -> Self::Lane {
        let lane_at = (lane() / 4 * 16 + lane() % 4 * 128) as usize;
        let at = (codes as *const u8).add(tile * TileFormat::Bf16.code_bytes() + lane_at);
        let (e, f) = (ld_nc_v4(at), ld_nc_v4(at.add(1024)));
        let (e2, f2) = (ld_nc_v4(at.add(512)), ld_nc_v4(at.add(1536)));
        [
            [e[0], f[0], e[1], f[1]],
            [e[2], f[2], e[3], f[3]],
            [e2[0], f2[0], e2[1], f2[1]],
            [e2[2], f2[2], e2[3], f2[3]],
        ]
    }

    #[inline(always)]
    fn fragments(l: &Self::Lane, j: u32) -> [u32; 4] {
        l[j as usize]
    }
}

impl Tiles for Fp8 {
    type Lane = ([[u32; 4]; 2], u32);
    const ZERO: Self::Lane = ([[0; 4]; 2], 0);
    const FACTOR: f32 = 1.0;
    const UNROLL: u32 = 3;
    const UNROLL_DUAL: u32 = 2;

    #[inline(always)]
    unsafe fn load(codes: u64, scales: u64, tile: usize) -> Self::Lane {
        let at =
            (codes as *const u8).add(tile * TileFormat::Fp8.code_bytes() + lane() as usize * 16);
        (
            [ld_nc_v4(at), ld_nc_v4(at.add(512))],
            *((scales as *const u8).add(tile * TileFormat::Fp8.scale_bytes()) as *const u32),
        )
    }

    #[inline(always)]
    fn fragments(l: &Self::Lane, j: u32) -> [u32; 4] {
        let v = &l.0[(j / 2) as usize];
        let (a, b) = (v[(2 * (j % 2)) as usize], v[(2 * (j % 2) + 1) as usize]);
        [
            hmul2(e4m3x2_to_f16x2(a), l.1),
            hmul2(e4m3x2_hi_to_f16x2(a), l.1),
            hmul2(e4m3x2_to_f16x2(b), l.1),
            hmul2(e4m3x2_hi_to_f16x2(b), l.1),
        ]
    }
}

/// f16x2 (1025, 1025): `1024 + c − 1025 = c − 1`, exactly.
const Q2_BIAS: u32 = 0x6401_6401;

/// f16x2 (1, 1): the all-ones A operand of `Q2::chunk`.
const Q2_ONES: u32 = 0x3C00_3C00;

impl Tiles for Q2 {
    type Lane = ([u32; 2], u32);
    const ZERO: Self::Lane = ([0; 2], 0);
    const FACTOR: f32 = 1.0;
    /// `Q2::chunk` accumulates 256·(c − 1)·x.
    const GEMV_FACTOR: f32 = 1.0 / 256.0;
    const UNROLL: u32 = 4;
    /// 3 chunks in flight per projection in the dual kernel: with 4, `Q2::chunk` needs 81
    /// registers (2 blocks per SM), and bounding it to 80 spills.
    const UNROLL_DUAL: u32 = 3;

    #[inline(always)]
    unsafe fn load(codes: u64, scales: u64, tile: usize) -> Self::Lane {
        let (lane, g) = (lane() as usize, lane() as usize / 4);
        (
            ld_nc_v2((codes as *const u8).add(tile * TileFormat::Q2.code_bytes() + lane * 8)),
            *((scales as *const u8).add(tile * TileFormat::Q2.scale_bytes() + g * 4) as *const u32),
        )
    }

    #[inline(always)]
    fn fragments(l: &Self::Lane, j: u32) -> [u32; 4] {
        let w = l.0[(j / 2) as usize] >> (8 * (j % 2));
        let s_lo = prmt(l.1, 0, 0x1010);
        let s_hi = prmt(l.1, 0, 0x3232);
        let f = |r: u32| hsub2(((w >> (2 * r)) & 0x0003_0003) | 0x6400_6400, Q2_BIAS);
        [
            hmul2(f(0), s_lo),
            hmul2(f(1), s_hi),
            hmul2(f(2), s_lo),
            hmul2(f(3), s_hi),
        ]
    }

    /// The row scale `d` is the same for the whole tile, so it is applied once per tile in
    /// f32 instead of once per value in f16, and the codes go to the `mma` unconverted: code
    /// `c` moved to bits 8..10 of an f16 whose other bits are 0x6400 is `1024 + 256·c` (one
    /// shift and one `lop3` per register, where [`Tiles::fragments`] spends four
    /// instructions). So `t = Σ (1024 + 256·c)·x = 256·Σ (c + 4)·x`; four more `mma` with an
    /// all-ones A give the chunk's `S = Σ x` per token (once for both projections), and
    /// `acc += d·(t − 1280·S) = 256·d·Σ (c − 1)·x`. Every product is exact in f32 and `t`
    /// stays within a few times the result, so the f32 sums lose nothing the default path
    /// keeps. Per tile: 16 × 2 + 4 `mma` + 10, and 4 `mma` per chunk, instead of 16 × 4 + 4.
    #[inline(always)]
    fn chunk<const DUAL: bool>(
        acc0: &mut [f32; 4],
        acc1: &mut [f32; 4],
        l: &(Self::Lane, Self::Lane),
        x: &[u32; 8],
    ) {
        let mut sum = [0.0f32; 4];
        unroll4!(J, 0 => {
            sum = mma_f16_f32([Q2_ONES; 4], [x[2 * J], x[2 * J + 1]], sum);
        });
        let tile = |acc: &mut [f32; 4], l: &Self::Lane| {
            let mut t = [0.0f32; 4];
            unroll4!(J, 0 => {
                let w = l.0[J / 2];
                // Register r of step J: codes at bits 2s and 16 + 2s, s = 4·(J % 2) + r.
                let f = |r: u32| {
                    let s2 = 2 * (4 * (J as u32 % 2) + r);
                    let v = if s2 <= 8 { w << (8 - s2) } else { w >> (s2 - 8) };
                    and_or(v, 0x0300_0300, 0x6400_6400)
                };
                t = mma_f16_f32([f(0), f(1), f(2), f(3)], [x[2 * J], x[2 * J + 1]], t);
            });
            let (d_lo, d_hi) = (f16_to_f32_bits(l.1), f16_to_f32_bits(l.1 >> 16));
            let d = [d_lo, d_lo, d_hi, d_hi];
            unroll4!(I, 0 => {
                acc[I] = fma_f32(fma_f32(sum[I], -1280.0, t[I]), d[I], acc[I]);
            });
        };
        tile(acc0, &l.0);
        if DUAL {
            tile(acc1, &l.1);
        }
    }
}

impl Tiles for Q4k {
    type Lane = ([u32; 4], [u32; 4]);
    const ZERO: Self::Lane = ([0; 4], [0; 4]);
    const FACTOR: f32 = 1.0;
    const UNROLL: u32 = 3;
    const UNROLL_DUAL: u32 = 1;

    #[inline(always)]
    unsafe fn load(codes: u64, scales: u64, tile: usize) -> Self::Lane {
        let (lane, g) = (lane() as usize, lane() as usize / 4);
        (
            ld_nc_v4((codes as *const u8).add(tile * TileFormat::Q4k.code_bytes() + lane * 16)),
            ld_nc_v4((scales as *const u8).add(tile * TileFormat::Q4k.scale_bytes() + g * 16)),
        )
    }

    /// Code `q` moved to bits 6..10 of an f16 whose other bits are 0x6400 is `1024 + 64·q`
    /// (one shift and one `lop3`), and `(1024 + 64·q)·(a/64) + (−b − 16·a) = a·q − b` in one
    /// `fma.f16x2`: the `sub.f16x2` that made `q` exact is gone (3 instructions a register
    /// instead of 4). `a/64` is exact (a power of two); `−b − 16·a` is rounded to f16 once per
    /// sub-block, which moves a value by at most half an f16 step of `16·a + b`.
    #[inline(always)]
    fn fragments(l: &Self::Lane, j: u32) -> [u32; 4] {
        let w = l.0[j as usize];
        let sb = (j / 2) as usize;
        let (a, nb) = (l.1[2 * sb], l.1[2 * sb + 1]);
        let a64 = hmul2(a, Q4K_INV64);
        let c = hfma2(a, Q4K_NEG16, nb);
        let (a_lo, a_hi) = (prmt(a64, 0, 0x1010), prmt(a64, 0, 0x3232));
        let (c_lo, c_hi) = (prmt(c, 0, 0x1010), prmt(c, 0, 0x3232));
        // Register r: codes at bits 4r and 16 + 4r, moved to bits 6 and 22.
        let v = |r: u32| {
            let s = if 4 * r <= 6 {
                w << (6 - 4 * r)
            } else {
                w >> (4 * r - 6)
            };
            and_or(s, 0x03C0_03C0, 0x6400_6400)
        };
        [
            hfma2(v(0), a_lo, c_lo),
            hfma2(v(1), a_hi, c_hi),
            hfma2(v(2), a_lo, c_lo),
            hfma2(v(3), a_hi, c_hi),
        ]
    }
}

/// f16x2 (1/64, 1/64).
const Q4K_INV64: u32 = 0x2400_2400;
/// f16x2 (−16, −16).
const Q4K_NEG16: u32 = 0xCC00_CC00;

impl StagedTiles for Fp8 {
    const CODE_BYTES: u32 = TileFormat::Fp8.code_bytes() as u32;
    const SCALE_BYTES: u32 = TileFormat::Fp8.scale_bytes() as u32;

    #[inline(always)]
    unsafe fn load_shared(codes: Smem, scales: Smem) -> Self::Lane {
        let at = codes.add(lane() * 16);
        ([at.ld_v4(), at.add(512).ld_v4()], scales.ld_u32())
    }
}

impl StagedTiles for Q2 {
    const CODE_BYTES: u32 = TileFormat::Q2.code_bytes() as u32;
    const SCALE_BYTES: u32 = TileFormat::Q2.scale_bytes() as u32;

    #[inline(always)]
    unsafe fn load_shared(codes: Smem, scales: Smem) -> Self::Lane {
        (
            codes.add(lane() * 8).ld_v2(),
            scales.add(lane() / 4 * 4).ld_u32(),
        )
    }
}

impl StagedTiles for Q4k {
    const CODE_BYTES: u32 = TileFormat::Q4k.code_bytes() as u32;
    const SCALE_BYTES: u32 = TileFormat::Q4k.scale_bytes() as u32;

    #[inline(always)]
    unsafe fn load_shared(codes: Smem, scales: Smem) -> Self::Lane {
        (
            codes.add(lane() * 16).ld_v4(),
            scales.add(lane() / 4 * 16).ld_v4(),
        )
    }
}
