//! NVFP4 for the W4A4 MMQ prefill arm (`nvfp4_mmq`): the weights' device layout (ggml's
//! `block_nvfp4` idea — 64 values, four UE4M3 sub-scales, packed E2M1 — in `mma` fragment
//! order) and the activation quantization to NVFP4, shared by the GPU kernels and the CPU
//! reference (same Rust, same f32 operations in the same order, so both produce the same bytes).
//!
//! **Weights** (`[rows, cols]`, rows a multiple of 16, cols of 64) are cut into tiles of 16 rows
//! × 64 columns (one `block_nvfp4` of each of 16 rows), row-tile major (`tile = row_tile ·
//! k_tiles + k_tile`, the order of the tiled NVFP4 layout), in two buffers:
//! - codes, [`TILE_CODE_BYTES`] = 512 per tile: lane `l = 4g + t` of a warp reads 16 bytes at
//!   `l · 16`, one 32-bit word per 16-column group `j` at `l · 16 + 4j`; bits 0..16 of the word
//!   hold row `g`'s E2M1 codes of columns `16j + 4t + i` (nibble `i`), bits 16..32 row `g + 8`'s.
//!   Each half-word, expanded nibble → byte to `2·e2m1` ([`DOUBLED`]), is exactly one
//!   `mma.m16n8k16` s8 A-fragment register (`a0` row g, `a1` row g + 8, k `4t + i`).
//! - scales, [`TILE_SCALE_BYTES`] = 64 per tile: the E4M3 scale of (row `lr`, group `j`) at
//!   `(lr % 8) · 8 + (lr / 8) · 4 + j` ([`scale_pos`]): lane group `g` reads its two rows' eight
//!   scales with one 8-byte load. This is byte for byte the scale layout of the tiled NVFP4
//!   copies (`super::nvfp4::tiled_scale_pos`), and the value of a scale is unchanged.
//!
//! 576 bytes per tile = 16 × 36 = 16 × `sizeof(block_nvfp4)`: exactly ggml's 4.5 bits a value,
//! the size of the `_t` copies it replaces; plus the tensor's f32 global scale (kept on the
//! host, passed to the kernel). Value `(r, c)` = `e2m1(code) · e4m3(scale) · global`, exactly the
//! NVFP4 value: the copies are a re-layout ([`relayout_tile`]), no requantization.
//!
//! **Activations** (bf16 `[tokens][k]`, `k` a multiple of 32) are quantized per token: a per-token
//! f32 global scale `G = amax_token / (6 · 448)` ([`act_global`]) so that the largest block scale
//! is E4M3's largest finite 448; per 16 values an E4M3 scale byte `e4m3(amax_16 / G / 6)` (round
//! to nearest even, [`act_scale`]); E2M1 codes `e2m1(x / (e4m3(byte) · G))`, round to nearest
//! even, saturating at ±6 ([`act_code`]). Stored for the kernel as:
//! - codes: int8 `[tokens][k]`, each E2M1 code expanded to its doubled value `2·e2m1` ∈ {0, ±1,
//!   ±2, ±3, ±4, ±6, ±8, ±12} (lossless, one byte a value so B fragments need no conversion),
//!   each 32-block permuted by [`super::q4k_mmq::q8_pos`] so that lane `4g + t` finds its two
//!   groups' B registers (`k = 4t..4t+4` of group 0 and of group 1) as 8 bytes at `8t`;
//! - scales: f32 `[tokens][k / 16]`, `e4m3(byte) · (G / 4)`: the factor the integer dot of two
//!   doubled values needs ((`2·e2m1_w`)·(`2·e2m1_x`) = 4 · the product).
//!
//! So one group's contribution is `e4m3(s_w) · scale_x · Σ_16 (2·e2m1_w)(2·e2m1_x)`, the sum an
//! exact integer (|Σ| ≤ 16 · 144), and the tensor's global scale multiplies the f32 sum once.
use super::{e2m1, e4m3, nvfp4};

/// Rows per tile.
pub const TILE_ROWS: usize = 16;
/// Columns per tile (one `block_nvfp4`).
pub const TILE_K: usize = 64;
/// Values per scale (one `mma.m16n8k16` step).
pub const GROUP: usize = 16;
/// Code bytes per tile.
pub const TILE_CODE_BYTES: usize = TILE_ROWS * TILE_K / 2;
/// Scale bytes per tile.
pub const TILE_SCALE_BYTES: usize = TILE_ROWS * TILE_K / GROUP;
/// Bytes of one ggml `block_nvfp4` (4 UE4M3 sub-scales + 32 bytes of packed E2M1).
pub const BLOCK_BYTES: usize = 4 + TILE_K / 2;
/// Largest E2M1 magnitude × largest finite E4M3: the per-token global scale divides `amax` by it.
pub const ACT_RANGE: f32 = e2m1::MAX * e4m3::MAX;

const _: () = assert!(TILE_CODE_BYTES == 512);
const _: () = assert!(TILE_SCALE_BYTES == 64);
const _: () = assert!(TILE_CODE_BYTES + TILE_SCALE_BYTES == TILE_ROWS * BLOCK_BYTES);
const _: () = assert!(TILE_K == nvfp4::TILE_K && TILE_ROWS == nvfp4::TILE_ROWS);
const _: () = assert!(TILE_SCALE_BYTES == nvfp4::TILE_SCALE_BYTES);

/// `2·e2m1(code)` for each 4-bit code: the integers the int8 tensor cores multiply.
pub const DOUBLED: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// (code bytes, scale bytes) of a `rows × cols` matrix.
pub const fn bytes(rows: usize, cols: usize) -> (usize, usize) {
    let tiles = (rows / TILE_ROWS) * (cols / TILE_K);
    (tiles * TILE_CODE_BYTES, tiles * TILE_SCALE_BYTES)
}

/// Where the code of element (`lr`, `lk`) of a tile lives: (byte offset in the tile's codes,
/// bit shift in that byte: 0 or 4).
pub const fn code_pos(lr: usize, lk: usize) -> (usize, u32) {
    let (j, c) = (lk / GROUP, lk % GROUP);
    let (t, i) = (c / 4, c % 4);
    let lane = (lr % 8) * 4 + t;
    let bit = (lr / 8) * 16 + i * 4;
    (lane * 16 + j * 4 + bit / 8, (bit % 8) as u32)
}

/// Byte offset of the scale of (row `lr`, group `j`) in a tile's scales.
pub const fn scale_pos(lr: usize, j: usize) -> usize {
    (lr % 8) * 8 + (lr / 8) * 4 + j
}

/// The E2M1 code of element (`lr`, `lk`) of a tile.
#[inline(always)]
pub fn code(codes: &[u8], lr: usize, lk: usize) -> u8 {
    let (off, sh) = code_pos(lr, lk);
    (codes[off] >> sh) & 15
}

/// Value of element (`lr`, `lk`) of a tile without the global scale.
#[inline(always)]
pub fn tile_value(codes: &[u8], scales: &[u8], lr: usize, lk: usize) -> f32 {
    e2m1::decode(code(codes, lr, lk)) * e4m3::decode(scales[scale_pos(lr, lk / GROUP)])
}

/// Re-lays one tile of the tiled NVFP4 layout (`super::nvfp4`, the decode copies) into this
/// layout: codes moved, scales copied (the two scale layouts coincide). Exact.
pub fn relayout_tile(src_codes: &[u8], src_scales: &[u8], codes: &mut [u8], scales: &mut [u8]) {
    codes[..TILE_CODE_BYTES].fill(0);
    for lr in 0..TILE_ROWS {
        for lk in 0..TILE_K {
            let (off, slot) = nvfp4::tiled_code_pos(lr, lk, 1);
            let w = u32::from_le_bytes([
                src_codes[off],
                src_codes[off + 1],
                src_codes[off + 2],
                src_codes[off + 3],
            ]);
            let (dst, sh) = code_pos(lr, lk);
            codes[dst] |= nvfp4::get_slot(w, slot) << sh;
        }
    }
    scales[..TILE_SCALE_BYTES].copy_from_slice(&src_scales[..TILE_SCALE_BYTES]);
}

/// The per-token global scale from the token's largest magnitude: `amax / (6 · 448)` (0 for an
/// all-zero token; NaN/Inf propagate, so such a token's outputs become non-finite).
#[inline(always)]
pub fn act_global(amax: f32) -> f32 {
    amax / ACT_RANGE
}

/// One 16-value group's scale under global `g`, from its largest magnitude `amax`: `(byte, f,
/// inv)` with `byte` = E4M3 of `amax / g / 6` (round to nearest even, saturating at 448; 0 when
/// `g` is 0), `f = e4m3(byte) · (g / 4)` (the kernel's factor for doubled codes) and `inv =
/// 1 / (e4m3(byte) · g)` (0 when that is 0) for [`act_code`].
#[inline(always)]
pub fn act_scale(amax: f32, g: f32) -> (u8, f32, f32) {
    let byte = if g > 0.0 {
        e4m3::encode(amax / g / e2m1::MAX)
    } else if g.is_nan() {
        0x7F
    } else {
        0
    };
    let s = e4m3::decode(byte);
    let denom = s * g;
    let inv = if denom > 0.0 { 1.0 / denom } else { 0.0 };
    (byte, s * (g * 0.25), inv)
}

/// The E2M1 code of `v` in a group with inverse scale `inv`: nearest, ties to even, ±6 saturated.
#[inline(always)]
pub fn act_code(v: f32, inv: f32) -> u8 {
    e2m1::encode(v * inv)
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
        for lane in 0..32 {
            let (g, t) = (lane / 4, lane % 4);
            for j in 0..4 {
                for i in 0..4 {
                    let w = lane * 16 + j * 4;
                    let bit = |row_hi: usize| row_hi * 16 + i * 4;
                    assert_eq!(
                        code_pos(g, 16 * j + 4 * t + i),
                        (w + bit(0) / 8, (bit(0) % 8) as u32)
                    );
                    assert_eq!(
                        code_pos(g + 8, 16 * j + 4 * t + i),
                        (w + bit(1) / 8, (bit(1) % 8) as u32)
                    );
                }
            }
        }
    }

    #[test]
    fn scale_positions_match_the_tiled_layout() {
        for lr in 0..TILE_ROWS {
            for j in 0..4 {
                assert_eq!(scale_pos(lr, j), nvfp4::tiled_scale_pos(lr, 16 * j, 1));
            }
        }
    }

    #[test]
    fn doubled_is_twice_e2m1() {
        for c in 0..16u8 {
            assert_eq!(DOUBLED[c as usize] as f32, 2.0 * e2m1::decode(c), "{c}");
        }
    }

    #[test]
    fn act_scale_reaches_448_at_the_token_maximum() {
        let g = act_global(3.7);
        let (byte, _, inv) = act_scale(3.7, g);
        assert_eq!(e4m3::decode(byte), 448.0);
        assert_eq!(act_code(3.7, inv), 7);
        assert_eq!(act_code(-3.7, inv), 15);
        assert_eq!(act_scale(0.0, 0.0), (0, 0.0, 0.0));
    }
}
