//! The tiled layouts the tensor-core GEMV and GEMM families read, one per overlay format.
//!
//! Every format cuts a `[rows, cols]` matrix into tiles of 16 rows × 64 columns, row-tile major
//! (`tile = row_tile · k_tiles + k_tile`), and stores each tile so that lane `l` of a warp reads
//! exactly its `mma.m16n8k16` A-fragments with 16- or 8-byte loads (BF16: 4-byte ones): for step `j` (columns
//! `16j..16j+16` of the tile) lane `l = 4g + q` holds registers `r = 0..4` of row
//! `g + 8·(r & 1)`, columns `2q + 8·(r >> 1)` and the next one (low half = even column). The
//! kernels turn a lane's data into f16 (BF16: bf16) fragments; the value of an element is
//! `decoded · global`, `global` being the per-tensor scale the layer keeps beside the buffers.
//! Rows must be a multiple of 16 and columns a multiple of 64.
//!
//! - [`TileFormat::Bf16`] (the BF16 overlay): the bf16 values as they are (`global = 1`), in
//!   the canonical layout of a `wgmma` K-major operand without swizzle, so that the prefill GEMM
//!   hands the staged tile to the tensor cores by descriptor: 8×8 core matrices of 128 bytes
//!   (row `lr % 8` at 16 bytes a row), core matrix `(lr / 8) · 8 + lk / 8`, i.e. element
//!   (`lr`, `lk`) at `((lr / 8) · 8 + lk / 8) · 128 + (lr % 8) · 16 + (lk % 8) · 2`. No
//!   scales. The decode GEMV's lane `4g + q` reads rows `g`, `g + 8` of core matrices `q` and
//!   `4 + q` (16 bytes each) and multiplies them in a permuted column order that its staged
//!   activations follow (`kernels::tiles::Bf16`).
//! - [`TileFormat::Fp8`] (the FP8 overlay): E4M3 bytes as stored in the checkpoint; the pair of
//!   steps `2p, 2p+1` at `p · 512 + lane · 16 + (j % 2) · 8 + r · 2`. Scales: one f16 pair per
//!   tile (`block scale / global`, `global` = the largest block scale of the tensor), 4 bytes.
//! - [`TileFormat::Q2`] (the Q2_0 overlay, ggml's `block_q2_0` re-laid, still 2 bits a value):
//!   8 bytes per lane at `lane · 8`, word `j / 2`; in it, register `r` of step `j` sits at bits
//!   `2s` (even column) and `16 + 2s` (odd column), `s = 4·(j % 2) + r`. Scales: each row's
//!   block `d` (f16, times one power of two per tensor, `global = 2^-e`), `(row g, row g+8)` as
//!   one f16 pair at `g · 4`, 32 bytes per tile. The code `c` means `(c − 1) · d`.
//! - [`TileFormat::Q4k`] (native Q4_K weights, ggml's `block_q4_K` re-laid): 4-bit codes, 16
//!   bytes per lane at `lane · 16`, word `j`; in it, register `r` sits at bits `4r` (even column)
//!   and `16 + 4r` (odd column). Scales: per row and 32-column sub-block the two f16 factors of
//!   `value = a·q − b` (`a = d·scale`, `b = dmin·min`, computed in f32 as ggml does, then times
//!   one power of two per tensor, `global = 2^-e`, and rounded to f16; `−b` is stored), 128
//!   bytes per tile: lane group `g` reads 16 bytes at `g · 16`, words
//!   `[a, −b]` of sub-block 0 then of sub-block 1, each an f16 pair `(row g, row g+8)`. The
//!   device copy takes 5 bits a value (ggml's takes 4.5: its 6-bit scales are expanded).

use super::{e4m3, q4k::f16_to_f32};

/// Rows per tile.
pub const TILE_ROWS: usize = 16;
/// Columns per tile.
pub const TILE_K: usize = 64;

/// A tiled overlay format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileFormat {
    /// bf16 as given (BF16 weights), in `wgmma`'s canonical core-matrix layout.
    Bf16,
    /// E4M3 with a per-tile f16 scale (from FP8 block-scaled weights).
    Fp8,
    /// 2-bit codes with per-row-block f16 scales (from Q2_0 weights).
    Q2,
    /// 4-bit codes with per-row-sub-block f16 (a, −b) (from Q4_K weights).
    Q4k,
}

impl TileFormat {
    /// Code bytes per tile.
    pub const fn code_bytes(self) -> usize {
        match self {
            TileFormat::Bf16 => TILE_ROWS * TILE_K * 2,
            TileFormat::Fp8 => TILE_ROWS * TILE_K,
            TileFormat::Q2 => TILE_ROWS * TILE_K / 4,
            TileFormat::Q4k => TILE_ROWS * TILE_K / 2,
        }
    }

    /// Scale bytes per tile.
    pub const fn scale_bytes(self) -> usize {
        match self {
            TileFormat::Bf16 => 0,
            TileFormat::Fp8 => 4,
            TileFormat::Q2 => 32,
            TileFormat::Q4k => 128,
        }
    }

    /// Where element (`lr`, `lk`) of a tile lives: (byte offset in the tile's codes, bit
    /// offset inside that byte's little-endian 32-bit word for [`TileFormat::Q2`], else 0).
    pub const fn code_pos(self, lr: usize, lk: usize) -> (usize, u32) {
        let (j, kk) = (lk / 16, lk % 16);
        let lane = (lr % 8) * 4 + (kk % 8) / 2;
        let r = (lr / 8) + 2 * (kk / 8);
        let half = kk % 2;
        match self {
            TileFormat::Bf16 => (
                ((lr / 8) * 8 + lk / 8) * 128 + (lr % 8) * 16 + (lk % 8) * 2,
                0,
            ),
            TileFormat::Fp8 => ((j / 2) * 512 + lane * 16 + (j % 2) * 8 + r * 2 + half, 0),
            TileFormat::Q2 => {
                let s = 4 * (j % 2) + r;
                (lane * 8 + (j / 2) * 4, (2 * s + 16 * half) as u32)
            }
            TileFormat::Q4k => (lane * 16 + j * 4, (4 * r + 16 * half) as u32),
        }
    }

    /// Byte offset of the f16 scale that applies to row `lr` of a tile (`None`: no scales).
    /// For [`TileFormat::Q4k`], the factor `a` of sub-block 0 (see [`TileFormat::q4k_pos`]).
    pub const fn scale_pos(self, lr: usize) -> Option<usize> {
        match self {
            TileFormat::Bf16 => None,
            TileFormat::Fp8 => Some(0),
            TileFormat::Q2 => Some((lr % 8) * 4 + 2 * (lr / 8)),
            TileFormat::Q4k => Some(Self::q4k_pos(lr, 0, false)),
        }
    }

    /// Byte offset in a [`TileFormat::Q4k`] tile's scales of row `lr`'s `a` (or `−b` when
    /// `neg_b`) for 32-column sub-block `sb` (0 or 1).
    pub const fn q4k_pos(lr: usize, sb: usize, neg_b: bool) -> usize {
        (lr % 8) * 16 + sb * 8 + if neg_b { 4 } else { 0 } + 2 * (lr / 8)
    }

    /// Decodes one tile (without the global scale) into `out[row][col]`.
    pub fn decode_tile(self, codes: &[u8], scales: &[u8], out: &mut [[f32; TILE_K]; TILE_ROWS]) {
        for (lr, row) in out.iter_mut().enumerate() {
            let scale = self
                .scale_pos(lr)
                .map(|s| f16_to_f32(u16::from_le_bytes([scales[s], scales[s + 1]])));
            for (lk, v) in row.iter_mut().enumerate() {
                let (off, bit) = self.code_pos(lr, lk);
                *v = match self {
                    TileFormat::Bf16 => f32::from_bits(
                        (u16::from_le_bytes([codes[off], codes[off + 1]]) as u32) << 16,
                    ),
                    TileFormat::Fp8 => e4m3::decode(codes[off]) * scale.unwrap_or(1.0),
                    TileFormat::Q2 => {
                        let word = u32::from_le_bytes([
                            codes[off],
                            codes[off + 1],
                            codes[off + 2],
                            codes[off + 3],
                        ]);
                        (((word >> bit) & 3) as f32 - 1.0) * scale.unwrap_or(1.0)
                    }
                    TileFormat::Q4k => {
                        let word = u32::from_le_bytes([
                            codes[off],
                            codes[off + 1],
                            codes[off + 2],
                            codes[off + 3],
                        ]);
                        let f = |at: usize| {
                            f16_to_f32(u16::from_le_bytes([scales[at], scales[at + 1]]))
                        };
                        let sb = lk / 32;
                        let (a, nb) = (
                            f(Self::q4k_pos(lr, sb, false)),
                            f(Self::q4k_pos(lr, sb, true)),
                        );
                        ((word >> bit) & 15) as f32 * a + nb
                    }
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element of a tile has its own place, and the places fill the tile exactly.
    #[test]
    fn positions_are_a_bijection() {
        for f in [
            TileFormat::Bf16,
            TileFormat::Fp8,
            TileFormat::Q2,
            TileFormat::Q4k,
        ] {
            let bits_per = match f {
                TileFormat::Bf16 => 16,
                TileFormat::Fp8 => 8,
                TileFormat::Q2 => 2,
                TileFormat::Q4k => 4,
            };
            let mut used = [false; TILE_ROWS * TILE_K * 16];
            for lr in 0..TILE_ROWS {
                for lk in 0..TILE_K {
                    let (off, bit) = f.code_pos(lr, lk);
                    let first = off * 8 + bit as usize;
                    assert!(off < f.code_bytes(), "{f:?} ({lr},{lk}) past the tile");
                    for (b, u) in used.iter_mut().enumerate().skip(first).take(bits_per) {
                        assert!(!*u, "{f:?} ({lr},{lk}) collides at bit {b}");
                        *u = true;
                    }
                }
            }
            assert!(
                used[..f.code_bytes() * 8].iter().all(|&u| u),
                "{f:?} leaves holes"
            );
        }
    }

    /// Lane `4g + q` finds, in its step-`j` register `r`, row `g + 8(r&1)`, columns
    /// `16j + 2q + 8(r>>1)` (+1 in the high half): the mma A-fragment order (BF16: see
    /// `bf16_lanes_read_core_matrix_rows`).
    #[test]
    fn lanes_hold_their_fragments() {
        for lane in 0..32 {
            let (g, q) = (lane / 4, lane % 4);
            for j in 0..4 {
                for r in 0..4 {
                    let (lr, lk) = (g + 8 * (r & 1), 16 * j + 2 * q + 8 * (r >> 1));
                    assert_eq!(
                        TileFormat::Fp8.code_pos(lr, lk).0,
                        (j / 2) * 512 + lane * 16 + (j % 2) * 8 + r * 2
                    );
                    let (off, bit) = TileFormat::Q2.code_pos(lr, lk + 1);
                    assert_eq!(off, lane * 8 + (j / 2) * 4);
                    assert_eq!(bit, 2 * (4 * (j as u32 % 2) + r as u32) + 16);
                    let (off, bit) = TileFormat::Q4k.code_pos(lr, lk + 1);
                    assert_eq!((off, bit), (lane * 16 + j * 4, 4 * r as u32 + 16));
                }
            }
        }
    }
}

#[cfg(test)]
mod bf16_tests {
    use super::*;

    /// A BF16 tile is 16 core matrices of 8 rows × 8 columns, 16 bytes a row, and the decode
    /// GEMV's lane `4g + q` finds row `g` (`g + 8`) of core matrices `q` and `4 + q` as 16
    /// contiguous bytes at `16g + 128·(q + 8·(row ≥ 8) + 4·(half))`: its step `j` register `r`
    /// (row `g + 8(r & 1)`) is pair `2(j % 2) + (r >> 1)` of core matrix `q + 4(j / 2)`.
    #[test]
    fn bf16_lanes_read_core_matrix_rows() {
        for lane in 0..32 {
            let (g, q) = (lane / 4, lane % 4);
            for j in 0..4 {
                for r in 0..4 {
                    let lr = g + 8 * (r & 1);
                    let lk = 32 * (j / 2) + 8 * q + 4 * (j % 2) + 2 * (r >> 1);
                    let load = ((r & 1) * 8 + q + 4 * (j / 2)) * 128 + 16 * g;
                    let pair = 2 * (j % 2) + (r >> 1);
                    assert_eq!(TileFormat::Bf16.code_pos(lr, lk).0, load + 4 * pair);
                    assert_eq!(TileFormat::Bf16.code_pos(lr, lk + 1).0, load + 4 * pair + 2);
                }
            }
        }
        // Core matrices: 8 rows × 16 bytes, contiguous.
        for cm in 0..16 {
            for row in 0..8 {
                for col in 0..8 {
                    let (lr, lk) = ((cm / 8) * 8 + row, (cm % 8) * 8 + col);
                    assert_eq!(
                        TileFormat::Bf16.code_pos(lr, lk).0,
                        cm * 128 + row * 16 + col * 2
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod q4k_tests {
    use super::*;

    /// The Q4_K scale slots of a tile are distinct and fill its 128 bytes.
    #[test]
    fn q4k_scale_slots_fill_the_tile() {
        let mut used = [false; 128];
        for lr in 0..TILE_ROWS {
            for sb in 0..2 {
                for neg in [false, true] {
                    let at = TileFormat::q4k_pos(lr, sb, neg);
                    assert!(!used[at] && !used[at + 1]);
                    used[at] = true;
                    used[at + 1] = true;
                }
            }
        }
        assert!(used.iter().all(|&u| u));
    }
}
