//! Q4_K for the MMQ prefill arm (`q4k_mmq`): the weights' device layout, the int8 activation
//! blocks, and the NVFP4 → Q4_K requantization, shared by the GPU kernels and the CPU reference
//! (same Rust, same f32 operations in the same order, so both compute the same bits).
//!
//! **Weights** (`[rows, cols]`, rows a multiple of 16, cols of 256) are cut into tiles of 16 rows ×
//! 256 columns (one Q4_K super-block of each of 16 rows), row-tile major (`tile = row_tile ·
//! k_tiles + k_tile`), in two buffers:
//! - codes, [`TILE_CODE_BYTES`] = 2048 per tile: lane `l = 4g + t` of a warp reads 64 bytes at
//!   `l · 64`, two 32-bit words per 32-column sub-block `s` at `l · 64 + s · 8`: word 0 holds row
//!   `g`, word 1 row `g + 8`; in a word, byte `i` holds column `4t + i` (low nibble) and
//!   `16 + 4t + i` (high nibble) of the sub-block. So `w & 0x0F0F0F0F` and `(w >> 4) &
//!   0x0F0F0F0F` are exactly the lane's `mma.m16n8k32` s8 A-fragment registers (`a0`/`a2` from
//!   word 0, `a1`/`a3` from word 1): codes 0..15 are non-negative int8.
//! - heads, [`TILE_HEAD_BYTES`] = 256 per tile: the 16 rows' block headers in row order, 16 bytes
//!   each, exactly ggml's first 16 bytes of `block_q4_K` (`d` f16, `dmin` f16, 12 bytes of packed
//!   6-bit scales and mins, [`super::q4k::scale_min`]); lane group `g` reads rows `g` and `g + 8`
//!   with two 16-byte loads.
//!
//! Together 2304 bytes per tile = 16 × 144: exactly ggml's 4.5 bits a value (the size of the
//! NVFP4 `_t` copies it replaces), and lossless from ggml blocks ([`code_pos`], [`HEAD_BYTES`]).
//! Value `(r, c)` = `d·sc[s]·q − dmin·m[s]` in f32 as ggml computes it.
//!
//! **Activations** (bf16 `[tokens][k]`) are quantized per 32 consecutive values of a token: `d =
//! amax / 127`, `q = round_half_even(x · (127 / amax))` clamped to ±127 ([`q8_scale`],
//! [`q8_code`]), `s = d · Σq`. Codes: int8 `[tokens][k]`, each 32-block permuted by [`q8_pos`] so
//! that lane `4g + t` finds its B-fragment (`k = 4t..4t+4` and `16 + 4t..`) as 8 bytes at `8t`;
//! `(d, s)`: f32 pairs `[tokens][k / 32]`. The value the GEMM sees is `d · q`, and `s` is exactly
//! `Σ d·q` over the block (the Q4_K mins term `dmin·m·Σx` uses it).
use super::q4k::{self, f16_to_f32};

/// Rows per MMQ tile.
pub const TILE_ROWS: usize = 16;
/// Columns per MMQ tile (one Q4_K super-block).
pub const TILE_K: usize = q4k::QK_K;
/// Values per sub-block (one `m16n8k32` step, one activation block).
pub const SUB: usize = 32;
/// Code bytes per tile.
pub const TILE_CODE_BYTES: usize = TILE_ROWS * TILE_K / 2;
/// Header bytes per row per super-block (ggml's `d`, `dmin`, packed scales).
pub const HEAD_BYTES: usize = 4 + q4k::SCALE_BYTES;
/// Header bytes per tile.
pub const TILE_HEAD_BYTES: usize = TILE_ROWS * HEAD_BYTES;

const _: () = assert!(TILE_CODE_BYTES == 2048);
const _: () = assert!(TILE_HEAD_BYTES == 256);
const _: () = assert!(TILE_CODE_BYTES + TILE_HEAD_BYTES == TILE_ROWS * q4k::BLOCK_BYTES);
const _: () = assert!(HEAD_BYTES + TILE_K / 2 == q4k::BLOCK_BYTES);

/// (code bytes, head bytes) of a `rows × cols` matrix.
pub const fn bytes(rows: usize, cols: usize) -> (usize, usize) {
    let tiles = (rows / TILE_ROWS) * (cols / TILE_K);
    (tiles * TILE_CODE_BYTES, tiles * TILE_HEAD_BYTES)
}

/// Where the code of element (`lr`, `lk`) of a tile lives: (byte offset in the tile's codes,
/// bit shift in that byte: 0 or 4).
pub const fn code_pos(lr: usize, lk: usize) -> (usize, u32) {
    let (s, c) = (lk / SUB, lk % SUB);
    let (t, i, hi) = ((c % 16) / 4, c % 4, c / 16);
    let lane = (lr % 8) * 4 + t;
    (lane * 64 + s * 8 + (lr / 8) * 4 + i, 4 * hi as u32)
}

/// Byte offset of row `lr`'s header in a tile's heads.
pub const fn head_pos(lr: usize) -> usize {
    lr * HEAD_BYTES
}

/// `(d·sc, dmin·m)` of sub-block `j` from a 16-byte header, in f32 exactly as ggml.
#[inline(always)]
pub fn sub_scales(head: &[u8], j: usize) -> (f32, f32) {
    let d = f16_to_f32(u16::from_le_bytes([head[0], head[1]]));
    let dmin = f16_to_f32(u16::from_le_bytes([head[2], head[3]]));
    let (sc, m) = q4k::scale_min(&head[4..HEAD_BYTES], j);
    (d * sc as f32, dmin * m as f32)
}

/// `(sc, m)` of sub-block `J` from the header's packed-scale words (`w[0..3]` = bytes 4..16 as
/// little-endian u32), as [`super::q4k::scale_min`] reads them; for kernels (`J` a constant).
#[inline(always)]
pub fn scale_min_words<const J: usize>(w: [u32; 3]) -> (u32, u32) {
    let byte = |b: usize| (w[b / 4] >> (8 * (b % 4))) & 0xFF;
    if J < 4 {
        (byte(J) & 63, byte(J + 4) & 63)
    } else {
        (
            (byte(J + 4) & 0xF) | ((byte(J - 4) >> 6) << 4),
            (byte(J + 4) >> 4) | ((byte(J) >> 6) << 4),
        )
    }
}

/// Decodes one tile into `out[row][col]` (16 × 256, values as ggml's dequantization gives them).
pub fn decode_tile(codes: &[u8], heads: &[u8], out: &mut [[f32; TILE_K]; TILE_ROWS]) {
    for (lr, row) in out.iter_mut().enumerate() {
        let head = &heads[head_pos(lr)..head_pos(lr) + HEAD_BYTES];
        for s in 0..TILE_K / SUB {
            let (a, b) = sub_scales(head, s);
            for c in 0..SUB {
                let (off, sh) = code_pos(lr, s * SUB + c);
                row[s * SUB + c] = a * ((codes[off] >> sh) & 15) as f32 - b;
            }
        }
    }
}

/// Position of value `c` (0..32) of an activation block in its permuted 32 bytes.
pub const fn q8_pos(c: usize) -> usize {
    let (t, i, hi) = ((c % 16) / 4, c % 4, c / 16);
    t * 8 + hi * 4 + i
}

/// `(d, inv)` of an activation block with largest magnitude `amax`: `d = amax / 127`, `inv =
/// 127 / amax` (0 when `amax` is 0 or NaN; a NaN/Inf `amax` gives a non-finite `d`, so the
/// token's outputs become non-finite too).
#[inline(always)]
pub fn q8_scale(amax: f32) -> (f32, f32) {
    let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
    (amax / 127.0, inv)
}

/// The int8 code of `v` in a block with inverse scale `inv`: nearest, ties to even, in ±127.
#[inline(always)]
pub fn q8_code(v: f32, inv: f32) -> i32 {
    rne((v * inv).clamp(-127.0, 127.0)) as i32
}

/// Round half to even for `|v| ≤ 2^22` (adding and removing 1.5·2^23 leaves the nearest
/// integer; identical in every IEEE f32 implementation).
#[inline(always)]
pub fn rne(v: f32) -> f32 {
    (v + 12_582_912.0) - 12_582_912.0
}

/// f32 → f16 bits, round to nearest even, saturating at the largest finite f16 (65504) instead
/// of overflowing to infinity; NaN → a quiet NaN.
#[inline(always)]
pub fn f32_to_f16_sat(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let a = b & 0x7FFF_FFFF;
    if a > 0x7F80_0000 {
        return sign | 0x7E00;
    }
    if a >= 0x477F_F000 {
        return sign | 0x7BFF;
    }
    if a < 0x3880_0000 {
        // Below 2^-14: subnormal, in units of 2^-24 (1024 units carry into the smallest normal).
        return sign | rne(f32::from_bits(a) * 16_777_216.0) as u16;
    }
    let mut h = ((((a >> 23) - 112) << 10) | ((a >> 13) & 0x3FF)) as u16;
    let rem = a & 0x1FFF;
    if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
        h += 1;
    }
    sign | h
}

/// Search candidates of [`fit_sub_block`]: starting ranges `(hi − lo) / (15 + STEP·i)`.
const FIT_CANDIDATES: i32 = 4;
const FIT_STEP: f32 = 0.5;

/// The 4-bit code of `v` under `value = a·q − b`: nearest in 0..=15 (0 when `a` is 0).
#[inline(always)]
pub fn q4_code(v: f32, a: f32, b: f32) -> u32 {
    if a > 0.0 {
        rne(((v + b) / a).clamp(0.0, 15.0)) as u32
    } else {
        0
    }
}

/// The best `(scale, min)` of one 32-value sub-block, `x ≈ scale·q − min` with `q` in 0..=15 and
/// `min ≥ 0`: from starting ranges around `(max − min(0, lo)) / 15`, each refined twice by least
/// squares on its codes, the smallest squared error kept. `x(i)` gives value `i` (0..32).
#[inline(always)]
pub fn fit_sub_block(x: impl Fn(usize) -> f32) -> (f32, f32) {
    let (mut lo, mut hi) = (0.0f32, f32::MIN);
    for i in 0..SUB {
        let v = x(i);
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi <= lo {
        return (0.0, -lo);
    }
    let err = |a: f32, b: f32| -> f32 {
        let mut e = 0.0f32;
        for i in 0..SUB {
            let v = x(i);
            let d = a * q4_code(v, a, b) as f32 - b - v;
            e += d * d;
        }
        e
    };
    let mut best = ((hi - lo) / 15.0, -lo);
    let mut best_err = err(best.0, best.1);
    for step in -FIT_CANDIDATES..=FIT_CANDIDATES {
        let mut a = (hi - lo) / (15.0 + FIT_STEP * step as f32);
        let mut b = -lo;
        for _ in 0..2 {
            let (mut sq, mut sqq, mut sx, mut sqx) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
            for i in 0..SUB {
                let v = x(i);
                let q = q4_code(v, a, b) as f32;
                sq += q;
                sqq += q * q;
                sx += v;
                sqx += q * v;
            }
            let n = SUB as f32;
            let det = n * sqq - sq * sq;
            if det <= 0.0 {
                break;
            }
            let (mut na, mut nb) = ((n * sqx - sq * sx) / det, (sq * sqx - sqq * sx) / det);
            if nb < 0.0 {
                na = sqx / sqq.max(f32::MIN_POSITIVE);
                nb = 0.0;
            }
            if !(na > 0.0 && na.is_finite()) {
                break;
            }
            a = na;
            b = nb;
        }
        let e = err(a, b);
        if e < best_err {
            best = (a, b);
            best_err = e;
        }
    }
    best
}

/// The 6-bit multiple of `step` nearest `v` (0 when `step` is 0).
#[inline(always)]
pub fn quant6(v: f32, step: f32) -> u32 {
    if step > 0.0 {
        rne((v / step).clamp(0.0, 63.0)) as u32
    } else {
        0
    }
}

/// The super-block scales `(d, dmin)` as f16 bits from the largest sub-block scale and min.
#[inline(always)]
pub fn super_scales(amax: f32, mmax: f32) -> (u16, u16) {
    (f32_to_f16_sat(amax / 63.0), f32_to_f16_sat(mmax / 63.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_positions_are_a_bijection_and_fragment_ordered() {
        let mut used = [0u8; TILE_CODE_BYTES];
        for lr in 0..TILE_ROWS {
            for lk in 0..TILE_K {
                let (off, sh) = code_pos(lr, lk);
                assert_eq!(used[off] & (15 << sh), 0, "({lr},{lk}) collides");
                used[off] |= 15 << sh;
            }
        }
        assert!(used.iter().all(|&u| u == 0xFF));
        // Lane 4g+t, sub-block s: word 0 low nibbles = a0 (row g, k 4t+i), high = a2 (k 16+4t+i).
        for lane in 0..32 {
            let (g, t) = (lane / 4, lane % 4);
            for s in 0..8 {
                for i in 0..4 {
                    let w = lane * 64 + s * 8;
                    assert_eq!(code_pos(g, s * 32 + 4 * t + i), (w + i, 0));
                    assert_eq!(code_pos(g, s * 32 + 16 + 4 * t + i), (w + i, 4));
                    assert_eq!(code_pos(g + 8, s * 32 + 4 * t + i), (w + 4 + i, 0));
                    assert_eq!(code_pos(g + 8, s * 32 + 16 + 4 * t + i), (w + 4 + i, 4));
                }
            }
        }
    }

    #[test]
    fn q8_positions_are_a_permutation_in_fragment_order() {
        let mut seen = [false; 32];
        for c in 0..32 {
            assert!(!seen[q8_pos(c)]);
            seen[q8_pos(c)] = true;
        }
        for t in 0..4 {
            for i in 0..4 {
                assert_eq!(q8_pos(4 * t + i), 8 * t + i);
                assert_eq!(q8_pos(16 + 4 * t + i), 8 * t + 4 + i);
            }
        }
    }

    #[test]
    fn scale_words_read_as_scale_min() {
        let mut bytes = [0u8; 12];
        for seed in 0..200u32 {
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = (seed.wrapping_mul(2_654_435_761).rotate_left(i as u32 * 3) >> 7) as u8;
            }
            let w: [u32; 3] = core::array::from_fn(|i| {
                u32::from_le_bytes([
                    bytes[4 * i],
                    bytes[4 * i + 1],
                    bytes[4 * i + 2],
                    bytes[4 * i + 3],
                ])
            });
            let got = [
                scale_min_words::<0>(w),
                scale_min_words::<1>(w),
                scale_min_words::<2>(w),
                scale_min_words::<3>(w),
                scale_min_words::<4>(w),
                scale_min_words::<5>(w),
                scale_min_words::<6>(w),
                scale_min_words::<7>(w),
            ];
            for (j, g) in got.iter().enumerate() {
                let (s, m) = q4k::scale_min(&bytes, j);
                assert_eq!(*g, (s as u32, m as u32), "seed {seed} j {j}");
            }
        }
    }

    #[test]
    fn rne_rounds_half_to_even() {
        for (v, want) in [
            (0.5f32, 0.0f32),
            (1.5, 2.0),
            (2.5, 2.0),
            (-0.5, 0.0),
            (-1.5, -2.0),
            (126.6, 127.0),
            (-3.49, -3.0),
        ] {
            assert_eq!(rne(v), want, "{v}");
        }
    }

    #[test]
    fn f16_conversion_rounds_to_nearest_even_and_saturates() {
        let mut x = 1u32;
        for _ in 0..200_000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            // Magnitudes from 2^-30 to 2^17.
            let v = f32::from_bits((x & 0x807F_FFFF) | ((97 + (x >> 23) % 48) << 23));
            let got = f32_to_f16_sat(v);
            let back = f16_to_f32(got);
            if v.abs() >= 65520.0 {
                assert_eq!(got & 0x7FFF, 0x7BFF, "{v}");
                continue;
            }
            // The nearest f16: no other f16 neighbour is closer.
            let err = (back as f64 - v as f64).abs();
            for n in [got.wrapping_sub(1), got.wrapping_add(1)] {
                let o = f16_to_f32(n);
                if o.is_finite() && (o < 0.0) == (v < 0.0) {
                    assert!((o as f64 - v as f64).abs() >= err, "{v}: {back} vs {o}");
                }
            }
        }
    }

    #[test]
    fn fit_reproduces_a_q4_grid() {
        // Values exactly on a 16-level grid come back (nearly) exactly.
        let (a, b) = (0.37f32, 1.3f32);
        let x = |i: usize| a * ((i * 7) % 16) as f32 - b;
        let (fa, fb) = fit_sub_block(x);
        for i in 0..32 {
            let v = x(i);
            let r = fa * q4_code(v, fa, fb) as f32 - fb;
            assert!((r - v).abs() < 1e-4, "{i}: {r} vs {v}");
        }
    }
}
