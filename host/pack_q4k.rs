//! Q4_K on the host: a quantizer f32 → `block_q4_K` (ggml-compatible bytes) and checks.
use crate::error::Result;
use crate::pack::BlockFormat;
use denseffn_device::formats::q4k::{self, BLOCK_BYTES, QK_K};
use denseffn_device::formats::q4k_mmq;
use half::f16;

/// A Q4_K matrix `[rows, cols]`: `rows · cols / 256` blocks of 144 bytes, row-major (each row's
/// blocks in column order), exactly as GGUF stores it.
#[derive(Clone, Debug, PartialEq)]
pub struct Q4kHost {
    /// Output features.
    pub rows: usize,
    /// Input features (a multiple of 256).
    pub cols: usize,
    /// The blocks.
    pub blocks: Vec<u8>,
}

impl Q4kHost {
    /// Quantizes row-major f32 weights. Per 32-value sub-block a (scale, min) pair is searched
    /// (a grid of starting ranges, each refined by least squares on its codes, best squared
    /// error kept); the eight pairs are then quantized to 6 bits against f16 super-scales `d`,
    /// `dmin`, and the codes recomputed with the scales as stored.
    pub fn quantize(w: &[f32], rows: usize, cols: usize) -> Result<Self> {
        check(rows, cols)?;
        crate::pack::check_values(w, rows, cols)?;
        let mut blocks = Vec::with_capacity(rows * cols / QK_K * BLOCK_BYTES);
        for x in w.chunks_exact(QK_K) {
            blocks.extend_from_slice(&quantize_block(x));
        }
        Ok(Q4kHost { rows, cols, blocks })
    }

    /// Checks the size and that `d` and `dmin` of every block are finite and not negative.
    pub fn validate(&self, tensor: &str) -> Result<()> {
        FORMAT.validate(tensor, self.rows, self.cols, &self.blocks)
    }

    /// The blocks re-laid into the MMQ prefill layout (`denseffn_device::formats::q4k_mmq`):
    /// `(codes, heads)`, losslessly (headers byte for byte, codes moved nibble for nibble).
    /// Rows must be a multiple of 16.
    pub fn to_mmq(&self, tensor: &str) -> Result<(Vec<u8>, Vec<u8>)> {
        self.validate(tensor)?;
        if self.rows % q4k_mmq::TILE_ROWS != 0 {
            return Err(crate::error::Error::Shape(format!(
                "{tensor}: Q4_K MMQ copies need rows a multiple of {}, got {}",
                q4k_mmq::TILE_ROWS,
                self.rows
            )));
        }
        let per_row = self.cols / QK_K;
        let (cb, hb) = q4k_mmq::bytes(self.rows, self.cols);
        let (mut codes, mut heads) = (vec![0u8; cb], vec![0u8; hb]);
        for (bi, b) in self.blocks.chunks_exact(BLOCK_BYTES).enumerate() {
            let (r, kt) = (bi / per_row, bi % per_row);
            let tile = (r / q4k_mmq::TILE_ROWS) * per_row + kt;
            let lr = r % q4k_mmq::TILE_ROWS;
            let h = tile * q4k_mmq::TILE_HEAD_BYTES + q4k_mmq::head_pos(lr);
            heads[h..h + q4k_mmq::HEAD_BYTES].copy_from_slice(&b[..q4k_mmq::HEAD_BYTES]);
            for i in 0..QK_K {
                let (p, l) = (i / 64, i % 64);
                let byte = b[16 + 32 * p + l % 32];
                let q = if l < 32 { byte & 15 } else { byte >> 4 };
                let (off, sh) = q4k_mmq::code_pos(lr, i);
                codes[tile * q4k_mmq::TILE_CODE_BYTES + off] |= q << sh;
            }
        }
        Ok((codes, heads))
    }

    /// The inverse of [`Q4kHost::to_mmq`]: ggml blocks from MMQ-layout `codes` and `heads`.
    pub fn from_mmq(rows: usize, cols: usize, codes: &[u8], heads: &[u8]) -> Result<Self> {
        check(rows, cols)?;
        if rows % q4k_mmq::TILE_ROWS != 0
            || (codes.len(), heads.len()) != q4k_mmq::bytes(rows, cols)
        {
            return Err(crate::error::Error::Shape(format!(
                "Q4_K MMQ copies of [{rows}, {cols}]: {} code and {} head bytes, expected {:?} (rows a multiple of 16)",
                codes.len(),
                heads.len(),
                q4k_mmq::bytes(rows, cols)
            )));
        }
        let per_row = cols / QK_K;
        let mut blocks = vec![0u8; rows * per_row * BLOCK_BYTES];
        for (bi, b) in blocks.chunks_exact_mut(BLOCK_BYTES).enumerate() {
            let (r, kt) = (bi / per_row, bi % per_row);
            let tile = (r / q4k_mmq::TILE_ROWS) * per_row + kt;
            let lr = r % q4k_mmq::TILE_ROWS;
            let h = tile * q4k_mmq::TILE_HEAD_BYTES + q4k_mmq::head_pos(lr);
            b[..q4k_mmq::HEAD_BYTES].copy_from_slice(&heads[h..h + q4k_mmq::HEAD_BYTES]);
            for i in 0..QK_K {
                let (off, sh) = q4k_mmq::code_pos(lr, i);
                let q = (codes[tile * q4k_mmq::TILE_CODE_BYTES + off] >> sh) & 15;
                let (p, l) = (i / 64, i % 64);
                b[16 + 32 * p + l % 32] |= if l < 32 { q } else { q << 4 };
            }
        }
        Ok(Q4kHost { rows, cols, blocks })
    }

    /// Row-major f32 values, as ggml's `dequantize_row_q4_K` gives them.
    pub fn dequantize(&self) -> Vec<f32> {
        FORMAT.dequantize(self.rows, self.cols, &self.blocks)
    }
}

fn check(rows: usize, cols: usize) -> Result<()> {
    FORMAT.check_shape(rows, cols)
}

const FORMAT: BlockFormat = BlockFormat {
    name: "Q4_K",
    values: QK_K,
    bytes: BLOCK_BYTES,
    scales: &[("d", 0), ("dmin", 2)],
    decode: q4k::dequantize_block,
};

/// Best (scale, min) for one 32-value sub-block: `x ≈ scale·q − min`, q ∈ 0..=15, min ≥ 0.
fn fit_sub_block(x: &[f32]) -> (f32, f32) {
    let lo = x.iter().fold(0f32, |a, &v| a.min(v));
    let hi = x.iter().fold(f32::MIN, |a, &v| a.max(v));
    if hi <= lo {
        return (0.0, -lo);
    }
    let err = |a: f32, b: f32| -> f32 {
        x.iter()
            .map(|&v| {
                let q = if a > 0.0 {
                    ((v + b) / a).round().clamp(0.0, 15.0)
                } else {
                    0.0
                };
                (a * q - b - v).powi(2)
            })
            .sum()
    };
    let mut best = ((hi - lo) / 15.0, -lo);
    let mut best_err = err(best.0, best.1);
    for step in -8..=8 {
        let mut a = (hi - lo) / (15.0 + 0.25 * step as f32);
        let mut b = -lo;
        for _ in 0..4 {
            // Least squares of x ≈ a·q − b on the codes the current (a, b) gives.
            let qs: Vec<f32> = x
                .iter()
                .map(|&v| ((v + b) / a).round().clamp(0.0, 15.0))
                .collect();
            let n = x.len() as f32;
            let (sq, sx) = (qs.iter().sum::<f32>(), x.iter().sum::<f32>());
            let sqq: f32 = qs.iter().map(|q| q * q).sum();
            let sqx: f32 = qs.iter().zip(x).map(|(q, v)| q * v).sum();
            let det = n * sqq - sq * sq;
            if det <= 0.0 {
                break;
            }
            let (na, nb) = ((n * sqx - sq * sx) / det, (sq * sqx - sqq * sx) / det);
            let (na, nb) = if nb < 0.0 {
                (sqx / sqq.max(f32::MIN_POSITIVE), 0.0)
            } else {
                (na, nb)
            };
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

fn quantize_block(x: &[f32]) -> [u8; BLOCK_BYTES] {
    let fits: Vec<(f32, f32)> = x.chunks_exact(32).map(fit_sub_block).collect();
    let amax = fits.iter().fold(0f32, |a, f| a.max(f.0));
    let mmax = fits.iter().fold(0f32, |a, f| a.max(f.1));
    let d = f16::from_f32(amax / 63.0);
    let dmin = f16::from_f32(mmax / 63.0);
    let (df, mf) = (d.to_f32(), dmin.to_f32());
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for (j, &(a, b)) in fits.iter().enumerate() {
        sc[j] = if df > 0.0 {
            (a / df).round().clamp(0.0, 63.0) as u8
        } else {
            0
        };
        mn[j] = if mf > 0.0 {
            (b / mf).round().clamp(0.0, 63.0) as u8
        } else {
            0
        };
    }
    let mut block = [0u8; BLOCK_BYTES];
    block[0..2].copy_from_slice(&d.to_bits().to_le_bytes());
    block[2..4].copy_from_slice(&dmin.to_bits().to_le_bytes());
    block[4..16].copy_from_slice(&q4k::pack_scales(&sc, &mn));
    for (i, &v) in x.iter().enumerate() {
        let s = i / 32;
        let (a, b) = (df * sc[s] as f32, mf * mn[s] as f32);
        let q = if a > 0.0 {
            ((v + b) / a).round().clamp(0.0, 15.0) as u8
        } else {
            0
        };
        let (p, r) = (i / 64, i % 64);
        block[16 + 32 * p + r % 32] |= if r < 32 { q } else { q << 4 };
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::pack::random_activations;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn quantizer_rmse_on_gaussian_data() {
        let (r, c) = (64, 1024);
        let w = random_activations(r * c, &mut SmallRng::seed_from_u64(3));
        let q = Q4kHost::quantize(&w, r, c).unwrap();
        q.validate("w").unwrap();
        assert_eq!(q.blocks.len(), r * c / 256 * 144);
        let d = q.dequantize();
        let mse: f64 = w
            .iter()
            .zip(&d)
            .map(|(a, b)| ((a - b) as f64).powi(2))
            .sum::<f64>()
            / (r * c) as f64;
        let var: f64 = w.iter().map(|&a| (a as f64).powi(2)).sum::<f64>() / (r * c) as f64;
        let rel = (mse / var).sqrt();
        eprintln!(
            "Q4_K quantizer on N(0,1), {r}x{c}: RMSE {:.4} ({:.2}% of the RMS)",
            mse.sqrt(),
            100.0 * rel
        );
        // Measured 7.04% of the RMS here (2026-12-02); a regression in the search shows up above 7.5%.
        assert!(rel < 0.075, "relative RMSE {rel}");
        assert!(rel > 0.02, "suspiciously exact: {rel}");
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(matches!(
            Q4kHost::quantize(&[0.0; 128], 1, 128),
            Err(Error::Shape(_))
        ));
        assert!(matches!(
            Q4kHost::quantize(&[f32::NAN; 256], 1, 256),
            Err(Error::BadWeights(_))
        ));
        let mut q = Q4kHost::quantize(&vec![0.5; 256], 1, 256).unwrap();
        q.blocks[1] = 0xFC; // d = -inf (f16 0xFC00)
        q.blocks[0] = 0x00;
        assert!(matches!(q.validate("gate"), Err(Error::BadWeights(ref s)) if s.contains("gate")));
        q.blocks.pop();
        assert!(matches!(q.validate("gate"), Err(Error::Shape(_))));
    }

    #[test]
    fn mmq_layout_decodes_to_the_same_values() {
        let (r, c) = (32, 512);
        let w = random_activations(r * c, &mut SmallRng::seed_from_u64(8));
        let q = Q4kHost::quantize(&w, r, c).unwrap();
        let want = q.dequantize();
        let (codes, heads) = q.to_mmq("w").unwrap();
        assert_eq!(codes.len() + heads.len(), q.blocks.len());
        assert_eq!(Q4kHost::from_mmq(r, c, &codes, &heads).unwrap(), q);
        let mut tile = [[0f32; 256]; 16];
        for rt in 0..r / 16 {
            for kt in 0..c / 256 {
                let t = rt * (c / 256) + kt;
                q4k_mmq::decode_tile(
                    &codes[t * q4k_mmq::TILE_CODE_BYTES..],
                    &heads[t * q4k_mmq::TILE_HEAD_BYTES..],
                    &mut tile,
                );
                for (lr, row) in tile.iter().enumerate() {
                    for (lk, v) in row.iter().enumerate() {
                        let i = (rt * 16 + lr) * c + kt * 256 + lk;
                        assert_eq!(v.to_bits(), want[i].to_bits(), "({lr},{lk}) of tile {t}");
                    }
                }
            }
        }
        assert!(matches!(
            Q4kHost::quantize(&w[..8 * c], 8, c).unwrap().to_mmq("w"),
            Err(Error::Shape(_))
        ));
    }

    #[test]
    fn constant_and_zero_blocks_round_trip() {
        for v in [0.0f32, 0.5, -2.0] {
            let q = Q4kHost::quantize(&vec![v; 256], 1, 256).unwrap();
            for (i, d) in q.dequantize().iter().enumerate() {
                assert!(
                    (d - v).abs() <= 0.02 * v.abs().max(1e-3),
                    "value {i}: {d} for {v}"
                );
            }
        }
    }
}
