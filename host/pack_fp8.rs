//! FP8 block-scaled weights on the host (the layout of FP8 checkpoints): `weight` E4M3
//! `[rows, cols]` and `weight_scale_inv` f32 `[⌈rows/128⌉, ⌈cols/128⌉]`;
//! `value[r][c] = e4m3(weight[r][c]) · scale_inv[r/128][c/128]`. Shapes need not be multiples
//! of 128 (edge blocks are partial).
use crate::error::{Error, Result};
use denseffn_device::formats::e4m3;

/// Rows and columns per scale block.
pub const FP8_BLOCK: usize = 128;

/// An FP8 E4M3 matrix with one f32 scale per 128×128 block.
#[derive(Clone, Debug, PartialEq)]
pub struct Fp8Host {
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// E4M3 bytes, row-major.
    pub weight: Vec<u8>,
    /// Block scales, row-major `[⌈rows/128⌉, ⌈cols/128⌉]`.
    pub scale_inv: Vec<f32>,
}

impl Fp8Host {
    /// Scale blocks along (rows, cols).
    pub fn scale_dims(rows: usize, cols: usize) -> (usize, usize) {
        (rows.div_ceil(FP8_BLOCK), cols.div_ceil(FP8_BLOCK))
    }

    /// Quantizes row-major f32 weights: per block `scale = amax / 448`, codes the nearest E4M3
    /// of `v / scale` (an all-zero block gets scale 1).
    pub fn quantize(w: &[f32], rows: usize, cols: usize) -> Result<Self> {
        if rows == 0 || cols == 0 {
            return Err(Error::Shape(format!(
                "FP8 weights: zero-sized [{rows}, {cols}]"
            )));
        }
        crate::pack::check_values(w, rows, cols)?;
        let (br, bc) = Self::scale_dims(rows, cols);
        let mut scale_inv = vec![0f32; br * bc];
        for (r, row) in w.chunks_exact(cols).enumerate() {
            for (c, &v) in row.iter().enumerate() {
                let s = &mut scale_inv[(r / FP8_BLOCK) * bc + c / FP8_BLOCK];
                *s = s.max(v.abs());
            }
        }
        for s in &mut scale_inv {
            *s = if *s > 0.0 {
                (*s / e4m3::MAX).max(f32::MIN_POSITIVE)
            } else {
                1.0
            };
        }
        let weight = w
            .chunks_exact(cols)
            .enumerate()
            .flat_map(|(r, row)| {
                let scale_inv = &scale_inv;
                row.iter().enumerate().map(move |(c, &v)| {
                    e4m3::encode(v / scale_inv[(r / FP8_BLOCK) * bc + c / FP8_BLOCK])
                })
            })
            .collect();
        Ok(Fp8Host {
            rows,
            cols,
            weight,
            scale_inv,
        })
    }

    /// Checks sizes; no NaN weight byte (0x7F / 0xFF); every scale finite and positive.
    pub fn validate(&self, tensor: &str) -> Result<()> {
        let (br, bc) = Self::scale_dims(self.rows, self.cols);
        if self.rows == 0 || self.cols == 0 || self.weight.len() != self.rows * self.cols {
            return Err(Error::Shape(format!(
                "{tensor}: {} weight bytes for [{}, {}]",
                self.weight.len(),
                self.rows,
                self.cols
            )));
        }
        if self.scale_inv.len() != br * bc {
            return Err(Error::Shape(format!(
                "{tensor}: {} block scales for [{}, {}], expected [{br}, {bc}] = {}",
                self.scale_inv.len(),
                self.rows,
                self.cols,
                br * bc
            )));
        }
        if let Some(i) = self.weight.iter().position(|&b| b & 0x7F == 0x7F) {
            return Err(Error::BadWeights(format!(
                "{tensor}: weight [{}, {}] is NaN",
                i / self.cols,
                i % self.cols
            )));
        }
        if let Some(i) = self
            .scale_inv
            .iter()
            .position(|s| !(s.is_finite() && *s > 0.0))
        {
            return Err(Error::BadWeights(format!(
                "{tensor}: block scale [{}, {}] is {}",
                i / bc,
                i % bc,
                self.scale_inv[i]
            )));
        }
        Ok(())
    }

    /// Row-major f32 values.
    pub fn dequantize(&self) -> Vec<f32> {
        let bc = Self::scale_dims(self.rows, self.cols).1;
        (0..self.rows * self.cols)
            .map(|i| {
                let (r, c) = (i / self.cols, i % self.cols);
                e4m3::decode(self.weight[i]) * self.scale_inv[(r / FP8_BLOCK) * bc + c / FP8_BLOCK]
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::random_activations;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn quantize_dequantize_with_partial_edge_blocks() {
        for (r, c) in [(200usize, 300usize), (128, 128), (1, 129), (129, 1)] {
            let mut w = random_activations(r * c, &mut SmallRng::seed_from_u64((r * c) as u64));
            // Blocks of very different magnitude: the scale must follow each block.
            for (i, v) in w.iter_mut().enumerate() {
                if (i / c) / FP8_BLOCK != (i % c) / FP8_BLOCK {
                    *v *= 1e-3;
                }
            }
            let q = Fp8Host::quantize(&w, r, c).unwrap();
            q.validate("w").unwrap();
            assert_eq!(q.scale_inv.len(), r.div_ceil(128) * c.div_ceil(128));
            let d = q.dequantize();
            for (i, (a, b)) in w.iter().zip(&d).enumerate() {
                let s = q.scale_inv[(i / c / 128) * c.div_ceil(128) + (i % c) / 128];
                // E4M3 has 3 mantissa bits: relative error ≤ 2^-4 for normals, ≤ half a
                // subnormal step (2^-10 · scale) below.
                assert!(
                    (a - b).abs() <= a.abs() / 16.0 + s * 2f32.powi(-10),
                    "[{r}x{c}] {i}: {a} -> {b}"
                );
            }
        }
    }

    #[test]
    fn bad_values_are_errors() {
        let q = Fp8Host::quantize(&[0.5; 300], 2, 150).unwrap();
        let mut bad = q.clone();
        bad.weight[7] = 0xFF;
        assert!(matches!(bad.validate("up"), Err(Error::BadWeights(ref s)) if s.contains("NaN")));
        for s in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
            let mut bad = q.clone();
            bad.scale_inv[1] = s;
            assert!(
                matches!(bad.validate("up"), Err(Error::BadWeights(_))),
                "scale {s}"
            );
        }
        let mut bad = q.clone();
        bad.scale_inv.pop();
        assert!(matches!(bad.validate("up"), Err(Error::Shape(_))));
        assert!(matches!(Fp8Host::quantize(&[], 0, 4), Err(Error::Shape(_))));
        assert!(matches!(
            Fp8Host::quantize(&[f32::NAN; 4], 2, 2),
            Err(Error::BadWeights(_))
        ));
    }
}
