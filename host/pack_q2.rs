//! Ternary Q2_0 on the host: a BitNet-style absmean quantizer f32 → `block_q2_0` and checks.
use crate::error::Result;
use crate::pack::BlockFormat;
use denseffn_device::formats::q2_0::{self, BLOCK_BYTES, BLOCK_VALUES};
use half::f16;

/// A Q2_0 matrix `[rows, cols]`: `rows · cols / 64` blocks of 18 bytes, row-major, as GGUF stores
/// it (type 42).
#[derive(Clone, Debug, PartialEq)]
pub struct Q2Host {
    /// Output features.
    pub rows: usize,
    /// Input features (a multiple of 64).
    pub cols: usize,
    /// The blocks.
    pub blocks: Vec<u8>,
}

impl Q2Host {
    /// Ternary quantization, absmean per block (as BitNet b1.58 does per tensor): `d = mean|w|`
    /// over the block's 64 values (as f16), codes `round(w / d)` clamped to {−1, 0, +1}.
    pub fn quantize_ternary(w: &[f32], rows: usize, cols: usize) -> Result<Self> {
        check(rows, cols)?;
        crate::pack::check_values(w, rows, cols)?;
        let mut blocks = Vec::with_capacity(rows * cols / BLOCK_VALUES * BLOCK_BYTES);
        for x in w.chunks_exact(BLOCK_VALUES) {
            let d = f16::from_f32(x.iter().map(|v| v.abs()).sum::<f32>() / BLOCK_VALUES as f32);
            let df = d.to_f32();
            let mut b = [0u8; BLOCK_BYTES];
            b[0..2].copy_from_slice(&d.to_bits().to_le_bytes());
            for (j, &v) in x.iter().enumerate() {
                let t = if df > 0.0 {
                    (v / df).round().clamp(-1.0, 1.0)
                } else {
                    0.0
                };
                b[2 + j / 4] |= ((t as i32 + 1) as u8) << (2 * (j % 4));
            }
            blocks.extend_from_slice(&b);
        }
        Ok(Q2Host { rows, cols, blocks })
    }

    /// Checks the size and that every block's `d` is finite and not negative.
    pub fn validate(&self, tensor: &str) -> Result<()> {
        FORMAT.validate(tensor, self.rows, self.cols, &self.blocks)
    }

    /// Row-major f32 values, as ggml's `dequantize_row_q2_0` gives them.
    pub fn dequantize(&self) -> Vec<f32> {
        FORMAT.dequantize(self.rows, self.cols, &self.blocks)
    }
}

fn check(rows: usize, cols: usize) -> Result<()> {
    FORMAT.check_shape(rows, cols)
}

const FORMAT: BlockFormat = BlockFormat {
    name: "Q2_0",
    values: BLOCK_VALUES,
    bytes: BLOCK_BYTES,
    scales: &[("d", 0)],
    decode: q2_0::dequantize_block,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::pack::random_activations;
    use denseffn_device::formats::q4k::f16_to_f32;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn codes_follow_the_signs_and_outputs_are_ternary() {
        // Ternary inputs (±0.25 and 0): every code is the input's sign.
        let (r, c) = (4, 128);
        let w: Vec<f32> = (0..r * c)
            .map(|i| [(-1.0f32), 0.0, 1.0][(i * 7 + i / 5) % 3] * 0.25)
            .collect();
        let q = Q2Host::quantize_ternary(&w, r, c).unwrap();
        q.validate("w").unwrap();
        // absmean of a block with two-thirds ±0.25 is 1/6; round(±0.25 / (1/6)) = ±2 → clamped to ±1.
        for (b, x) in q
            .blocks
            .chunks_exact(BLOCK_BYTES)
            .zip(w.chunks_exact(BLOCK_VALUES))
        {
            for (j, &v) in x.iter().enumerate() {
                let want = (v.signum() * (v != 0.0) as i32 as f32 + 1.0) as u8;
                assert_eq!(q2_0::code(b, j), want);
            }
        }
        let g = random_activations(r * c, &mut SmallRng::seed_from_u64(1));
        let q = Q2Host::quantize_ternary(&g, r, c).unwrap();
        for (b, d) in q
            .blocks
            .chunks_exact(BLOCK_BYTES)
            .zip(q.dequantize().chunks_exact(BLOCK_VALUES))
        {
            let s = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            assert!(
                d.iter().all(|&v| v == 0.0 || v == s || v == -s),
                "non-ternary value"
            );
            assert!(
                s > 0.5 && s < 1.2,
                "absmean of N(0,1) is about 0.8, got {s}"
            );
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(matches!(
            Q2Host::quantize_ternary(&[0.0; 32], 1, 32),
            Err(Error::Shape(_))
        ));
        assert!(matches!(
            Q2Host::quantize_ternary(&[f32::INFINITY; 64], 1, 64),
            Err(Error::BadWeights(_))
        ));
        let mut q = Q2Host::quantize_ternary(&[0.5; 64], 1, 64).unwrap();
        q.blocks[1] = 0xFE; // d = NaN (f16 0xFE00)
        assert!(matches!(q.validate("down"), Err(Error::BadWeights(ref s)) if s.contains("down")));
        q.blocks.push(0);
        assert!(matches!(q.validate("down"), Err(Error::Shape(_))));
    }
}
