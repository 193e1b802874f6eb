//! Host-side packing of the overlay formats into the tiled layouts the GEMV/GEMM kernels read
//! (`denseffn_device::formats::tiles`): BF16 → bf16 tiles, FP8 block-scaled → E4M3 tiles, Q2_0
//! blocks → 2-bit tiles. Packing re-lays bits; it never requantizes (BF16 and Q2_0 keep every
//! value; FP8 keeps its codes and rounds each block's scale ratio to f16).
use crate::error::{Error, Result};
use crate::pack_fp8::{Fp8Host, FP8_BLOCK};
use crate::pack_q2::Q2Host;
use crate::pack_q4k::Q4kHost;
use denseffn_device::formats::tiles::{TileFormat, TILE_K, TILE_ROWS};
use denseffn_device::formats::{q2_0, q4k};
use half::{bf16, f16};

/// A matrix in one of the tiled overlay layouts, ready to upload.
#[derive(Clone, Debug, PartialEq)]
pub struct TiledHost {
    /// The layout.
    pub format: TileFormat,
    /// Output features (a multiple of 16).
    pub rows: usize,
    /// Input features (a multiple of 64).
    pub cols: usize,
    /// Tile codes, `tiles × format.code_bytes()`.
    pub codes: Vec<u8>,
    /// Tile scales, `tiles × format.scale_bytes()` (empty for BF16).
    pub scales: Vec<u8>,
    /// Per-tensor factor: `value = decoded · global`.
    pub global: f32,
}

/// The tile shape rule, with the tensor's name.
fn check_tiles(tensor: &str, what: &str, rows: usize, cols: usize) -> Result<()> {
    if rows == 0 || cols == 0 || rows % TILE_ROWS != 0 || cols % TILE_K != 0 {
        return Err(Error::Shape(format!(
            "{tensor}: {what} [{rows}, {cols}] must have rows a multiple of {TILE_ROWS} and columns a multiple of {TILE_K} (the GPU tile)"
        )));
    }
    Ok(())
}

/// The power of two `2^e` that brings `amax` into [2^lo, 2^(lo+1)) (1 for 0).
fn pow2_for(amax: f32, lo: i32) -> f32 {
    if amax > 0.0 && amax.is_finite() {
        2f32.powi(lo - amax.log2().floor() as i32)
    } else {
        1.0
    }
}

impl TiledHost {
    fn empty(format: TileFormat, rows: usize, cols: usize, global: f32) -> Self {
        let tiles = (rows / TILE_ROWS) * (cols / TILE_K);
        TiledHost {
            format,
            rows,
            cols,
            codes: vec![0; tiles * format.code_bytes()],
            scales: vec![0; tiles * format.scale_bytes()],
            global,
        }
    }

    fn tile_of(&self, r: usize, c: usize) -> usize {
        (r / TILE_ROWS) * (self.cols / TILE_K) + c / TILE_K
    }

    /// Byte and bit of element (`r`, `c`) in `codes`.
    fn code_at(&self, r: usize, c: usize) -> (usize, u32) {
        let (off, bit) = self.format.code_pos(r % TILE_ROWS, c % TILE_K);
        (self.tile_of(r, c) * self.format.code_bytes() + off, bit)
    }

    fn put_scale(&mut self, r: usize, c: usize, v: f16) {
        if let Some(off) = self.format.scale_pos(r % TILE_ROWS) {
            let at = self.tile_of(r, c) * self.format.scale_bytes() + off;
            self.scales[at..at + 2].copy_from_slice(&v.to_bits().to_le_bytes());
        }
    }

    /// BF16 row-major `[rows, cols]` → bf16 tiles (every value kept as it is, `global` = 1).
    /// Non-finite values are rejected.
    pub fn from_bf16(tensor: &str, rows: usize, cols: usize, data: &[bf16]) -> Result<Self> {
        check_tiles(tensor, "BF16", rows, cols)?;
        if data.len() != rows * cols {
            return Err(Error::Shape(format!(
                "{tensor}: {} values for [{rows}, {cols}]",
                data.len()
            )));
        }
        if let Some(i) = data.iter().position(|v| !v.is_finite()) {
            return Err(Error::BadWeights(format!(
                "{tensor}: weight [{}, {}] is {}",
                i / cols,
                i % cols,
                data[i]
            )));
        }
        let mut t = TiledHost::empty(TileFormat::Bf16, rows, cols, 1.0);
        for r in 0..rows {
            for c in 0..cols {
                let (at, _) = t.code_at(r, c);
                t.codes[at..at + 2].copy_from_slice(&data[r * cols + c].to_bits().to_le_bytes());
            }
        }
        Ok(t)
    }

    /// FP8 block-scaled → E4M3 tiles (codes unchanged) with one f16 scale per tile: the block's
    /// scale over the largest block scale of the tensor (which becomes `global`).
    pub fn from_fp8(tensor: &str, w: &Fp8Host) -> Result<Self> {
        w.validate(tensor)?;
        check_tiles(tensor, "FP8", w.rows, w.cols)?;
        let global = w.scale_inv.iter().fold(0f32, |m, &s| m.max(s));
        let global = if global > 0.0 { global } else { 1.0 };
        let mut t = TiledHost::empty(TileFormat::Fp8, w.rows, w.cols, global);
        let bc = w.cols.div_ceil(FP8_BLOCK);
        for r in 0..w.rows {
            for c in 0..w.cols {
                let (at, _) = t.code_at(r, c);
                t.codes[at] = w.weight[r * w.cols + c];
            }
        }
        for r in (0..w.rows).step_by(TILE_ROWS) {
            for c in (0..w.cols).step_by(TILE_K) {
                let s = w.scale_inv[(r / FP8_BLOCK) * bc + c / FP8_BLOCK] / global;
                let at = t.tile_of(r, c) * 4;
                let h = f16::from_f32(s).to_bits().to_le_bytes();
                t.scales[at..at + 4].copy_from_slice(&[h[0], h[1], h[0], h[1]]);
            }
        }
        Ok(t)
    }

    /// Q2_0 blocks → 2-bit tiles (codes unchanged) with each block's `d` (f16) times one power
    /// of two per tensor (exact).
    pub fn from_q2(tensor: &str, w: &Q2Host) -> Result<Self> {
        w.validate(tensor)?;
        check_tiles(tensor, "Q2_0", w.rows, w.cols)?;
        let d = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
        let dmax = w
            .blocks
            .chunks_exact(q2_0::BLOCK_BYTES)
            .fold(0f32, |m, b| m.max(d(b)));
        let f = pow2_for(dmax, 13);
        let mut t = TiledHost::empty(TileFormat::Q2, w.rows, w.cols, 1.0 / f);
        let per_row = w.cols / q2_0::BLOCK_VALUES;
        for r in 0..w.rows {
            for bi in 0..per_row {
                let b = &w.blocks[(r * per_row + bi) * q2_0::BLOCK_BYTES..][..q2_0::BLOCK_BYTES];
                t.put_scale(r, bi * q2_0::BLOCK_VALUES, f16::from_f32(d(b) * f));
                for j in 0..q2_0::BLOCK_VALUES {
                    let (at, bit) = t.code_at(r, bi * q2_0::BLOCK_VALUES + j);
                    let word = (q2_0::code(b, j) as u32) << bit;
                    for (i, byte) in word.to_le_bytes().iter().enumerate() {
                        t.codes[at + i] |= byte;
                    }
                }
            }
        }
        Ok(t)
    }

    /// Q4_K blocks → 4-bit tiles (codes unchanged) with each row's sub-block factors `a =
    /// d·scale` and `b = dmin·min` (f32 as ggml computes them, times one power of two per
    /// tensor, rounded to f16; `−b` stored): `value ≈ a·q − b`, within f16 rounding of ggml's.
    pub fn from_q4k(tensor: &str, w: &Q4kHost) -> Result<Self> {
        w.validate(tensor)?;
        check_tiles(tensor, "Q4_K", w.rows, w.cols)?;
        let per_row = w.cols / q4k::QK_K;
        let f16at = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
        // (a, b) of every (row, sub-block), and their largest magnitude.
        let mut ab = Vec::with_capacity(w.rows * w.cols / 32);
        let mut amax = 0f32;
        for b in w.blocks.chunks_exact(q4k::BLOCK_BYTES) {
            let (d, dmin) = (f16at(b, 0), f16at(b, 2));
            for j in 0..8 {
                let (sc, mn) = q4k::scale_min(&b[4..16], j);
                let (a, m) = (d * sc as f32, dmin * mn as f32);
                amax = amax.max((15.0 * a).abs()).max(m.abs());
                ab.push((a, m));
            }
        }
        let f = pow2_for(amax, 13);
        let mut t = TiledHost::empty(TileFormat::Q4k, w.rows, w.cols, 1.0 / f);
        for r in 0..w.rows {
            for bi in 0..per_row {
                let b = &w.blocks[(r * per_row + bi) * q4k::BLOCK_BYTES..][..q4k::BLOCK_BYTES];
                for i in 0..q4k::QK_K {
                    let c = bi * q4k::QK_K + i;
                    let (p, l) = (i / 64, i % 64);
                    let byte = b[16 + 32 * p + l % 32];
                    let q = if l < 32 { byte & 15 } else { byte >> 4 };
                    let (at, bit) = t.code_at(r, c);
                    for (k, v) in ((q as u32) << bit).to_le_bytes().iter().enumerate() {
                        t.codes[at + k] |= v;
                    }
                    if c % 32 == 0 {
                        let (a, m) = ab[(r * per_row + bi) * 8 + i / 32];
                        let tile = t.tile_of(r, c) * TileFormat::Q4k.scale_bytes();
                        let sb = (c % TILE_K) / 32;
                        for (neg, v) in [(false, a * f), (true, -m * f)] {
                            let at = tile + TileFormat::q4k_pos(r % TILE_ROWS, sb, neg);
                            t.scales[at..at + 2]
                                .copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
                        }
                    }
                }
            }
        }
        Ok(t)
    }

    /// Row-major f32 values as the kernels see them (global scale included).
    pub fn dequantize(&self) -> Vec<f32> {
        let k_tiles = self.cols / TILE_K;
        let mut out = vec![0f32; self.rows * self.cols];
        let mut tile = [[0f32; TILE_K]; TILE_ROWS];
        for rt in 0..self.rows / TILE_ROWS {
            for kt in 0..k_tiles {
                let t = rt * k_tiles + kt;
                self.format.decode_tile(
                    &self.codes[t * self.format.code_bytes()..],
                    &self.scales[t * self.format.scale_bytes()..],
                    &mut tile,
                );
                for (lr, row) in tile.iter().enumerate() {
                    let o = (rt * TILE_ROWS + lr) * self.cols + kt * TILE_K;
                    for (lk, v) in row.iter().enumerate() {
                        out[o + lk] = v * self.global;
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn gaussian(n: usize, rng: &mut SmallRng) -> Vec<f32> {
        crate::pack::random_activations(n, rng)
            .into_iter()
            .map(|v| v * rng.random_range(0.01f32..0.1))
            .collect()
    }

    #[test]
    fn bf16_packs_exactly() {
        let mut rng = SmallRng::seed_from_u64(3);
        let (r, c) = (32, 128);
        let w: Vec<bf16> = gaussian(r * c, &mut rng)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
        let t = TiledHost::from_bf16("w", r, c, &w).unwrap();
        let back = t.dequantize();
        for (a, b) in w.iter().zip(&back) {
            assert_eq!(a.to_f32(), *b);
        }
    }

    #[test]
    fn q2_packs_exactly() {
        let mut rng = SmallRng::seed_from_u64(4);
        let (r, c) = (16, 192);
        let q = Q2Host::quantize_ternary(&gaussian(r * c, &mut rng), r, c).unwrap();
        let t = TiledHost::from_q2("w", &q).unwrap();
        assert_eq!(t.dequantize(), q.dequantize());
    }

    #[test]
    fn q4k_packs_within_f16_rounding_of_ggml() {
        let mut rng = SmallRng::seed_from_u64(6);
        let (r, c) = (32, 512);
        let q = Q4kHost::quantize(&gaussian(r * c, &mut rng), r, c).unwrap();
        let t = TiledHost::from_q4k("w", &q).unwrap();
        let (a, b) = (q.dequantize(), t.dequantize());
        let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 2e-3 * scale, "{x} vs {y}");
        }
    }

    #[test]
    fn fp8_packs_within_f16_scale_rounding() {
        let mut rng = SmallRng::seed_from_u64(5);
        let (r, c) = (144, 320); // not multiples of 128: partial scale blocks
        let q = Fp8Host::quantize(&gaussian(r * c, &mut rng), r, c).unwrap();
        let t = TiledHost::from_fp8("w", &q).unwrap();
        let (a, b) = (q.dequantize(), t.dequantize());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= x.abs() * 1e-3, "{x} vs {y}");
        }
    }

    #[test]
    fn bad_shapes_and_values_are_errors() {
        let w = vec![bf16::from_f32(1.0); 8 * 64];
        assert!(matches!(
            TiledHost::from_bf16("w", 8, 64, &w),
            Err(Error::Shape(_))
        ));
        let mut w = vec![bf16::from_f32(1.0); 16 * 64];
        assert!(matches!(
            TiledHost::from_bf16("w", 16, 128, &w),
            Err(Error::Shape(_))
        ));
        w[5] = bf16::NAN;
        let e = TiledHost::from_bf16("gate", 16, 64, &w).unwrap_err();
        assert!(e.to_string().contains("gate"), "{e}");
    }
}
