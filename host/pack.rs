//! Host-side weights: NVFP4 matrices in the ModelOpt layout, the quantizer f32 → NVFP4, checks,
//! and the repacking into the tiled decode layout.
use crate::error::{Error, Result};
use denseffn_device::formats::nvfp4::{self, TILE_K, TILE_ROWS};
use denseffn_device::formats::{e2m1, e4m3};
use rand::{Rng, RngCore};

/// An NVFP4 matrix `[rows, cols]` on the host in the ModelOpt layout: `codes` u8
/// `[rows, cols/2]` (even column in the low nibble), `scales` E4M3 `[rows, cols/16]`, `global` f32.
#[derive(Clone, Debug, PartialEq)]
pub struct Nvfp4Host {
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// Packed E2M1 codes.
    pub codes: Vec<u8>,
    /// E4M3 scale per 16 values of a row.
    pub scales: Vec<u8>,
    /// Per-tensor scale (`weight_scale_2`).
    pub global: f32,
}

impl Nvfp4Host {
    /// Quantizes row-major f32 weights: global = amax / (6·448), per-16 scale = E4M3(amax16 / 6
    /// / global), codes = nearest E2M1 of `v / (scale·global)`. NaN/Inf weights are an error.
    pub fn quantize(w: &[f32], rows: usize, cols: usize) -> Result<Self> {
        check_dims("weights", rows, cols)?;
        check_values(w, rows, cols)?;
        let amax = w.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
        // Clamped to the smallest normal f32: for amax below ~1e-35 the quotient underflows, and a
        // zero global scale would make zero groups' scales 0/0 = NaN.
        let global = if amax > 0.0 {
            (amax / (e2m1::MAX * e4m3::MAX)).max(f32::MIN_POSITIVE)
        } else {
            1.0
        };
        let mut codes = vec![0u8; rows * cols / 2];
        let mut scales = vec![0u8; rows * cols / nvfp4::GROUP];
        for (gi, group) in w.chunks_exact(nvfp4::GROUP).enumerate() {
            let gmax = group.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
            let s = e4m3::encode(gmax / e2m1::MAX / global);
            scales[gi] = s;
            let step = e4m3::decode(s) * global;
            for (j, &v) in group.iter().enumerate() {
                let c = if step > 0.0 {
                    e2m1::encode(v / step)
                } else {
                    0
                };
                let idx = gi * nvfp4::GROUP + j;
                codes[idx / 2] |= if idx % 2 == 0 { c } else { c << 4 };
            }
        }
        Ok(Nvfp4Host {
            rows,
            cols,
            codes,
            scales,
            global,
        })
    }

    /// Random NVFP4 weights: every code equally likely, scales E4M3-encoded from [0.25, 1.0),
    /// global `global`. Real values, fast to make at model size (no f32 pass).
    pub fn random(rows: usize, cols: usize, global: f32, rng: &mut impl RngCore) -> Result<Self> {
        check_dims("weights", rows, cols)?;
        let mut codes = vec![0u8; rows * cols / 2];
        rng.fill_bytes(&mut codes);
        let scales = (0..rows * cols / nvfp4::GROUP)
            .map(|_| e4m3::encode(rng.random_range(0.25f32..1.0)))
            .collect();
        Ok(Nvfp4Host {
            rows,
            cols,
            codes,
            scales,
            global,
        })
    }

    /// Imports ggml's `block_nvfp4` rows (GGUF type 40): 64 values per 36-byte block, four UE4M3
    /// sub-block scales `d[4]`, then 32 code bytes where byte `8s + j` holds E2M1 values `j`
    /// (low nibble) and `j + 8` (high nibble) of sub-block `s`; ggml's value is
    /// `e2m1(code) · ue4m3(d[s])` (its code table is doubled and its scale decode halves). The
    /// result is exactly the same numbers in the ModelOpt layout with `global = 1`. UE4M3 bytes
    /// ignore bit 7; 0x7F decodes as 0 (as ggml does); 0xFF (480) has no E4M3 form and is an
    /// error.
    pub fn from_ggml_nvfp4(tensor: &str, rows: usize, cols: usize, blocks: &[u8]) -> Result<Self> {
        const QK: usize = 64;
        const BYTES: usize = 36;
        if rows == 0 || cols == 0 || cols % QK != 0 {
            return Err(Error::Shape(format!(
                "{tensor}: NVFP4 (ggml) needs columns a multiple of {QK}, got [{rows}, {cols}]"
            )));
        }
        let want = rows * cols / QK * BYTES;
        if blocks.len() != want {
            return Err(Error::Shape(format!(
                "{tensor}: {} bytes of NVFP4 blocks for [{rows}, {cols}], expected {want}",
                blocks.len()
            )));
        }
        let mut codes = vec![0u8; rows * cols / 2];
        let mut scales = vec![0u8; rows * cols / nvfp4::GROUP];
        for (b, blk) in blocks.chunks_exact(BYTES).enumerate() {
            for s in 0..4 {
                let d = blk[s];
                scales[b * 4 + s] = match d {
                    0xFF => {
                        return Err(Error::BadWeights(format!(
                            "{tensor}: block {b} sub-block {s} has UE4M3 scale byte 0xFF (480), beyond E4M3"
                        )))
                    }
                    0x7F => 0,
                    d => d & 0x7F,
                };
                let mut v = [0u8; 16];
                for j in 0..8 {
                    let q = blk[4 + 8 * s + j];
                    v[j] = q & 0xF;
                    v[j + 8] = q >> 4;
                }
                let at = (b * QK + 16 * s) / 2;
                for t in 0..8 {
                    codes[at + t] = v[2 * t] | (v[2 * t + 1] << 4);
                }
            }
        }
        let w = Nvfp4Host {
            rows,
            cols,
            codes,
            scales,
            global: 1.0,
        };
        w.validate(tensor)?;
        Ok(w)
    }

    /// Checks sizes and values: buffers match the shape; no NaN or negative scale; a finite,
    /// positive global scale. Names `tensor` in the error.
    pub fn validate(&self, tensor: &str) -> Result<()> {
        check_dims(tensor, self.rows, self.cols)?;
        if self.codes.len() != self.rows * self.cols / 2 {
            return Err(Error::Shape(format!(
                "{tensor}: {} code bytes for [{}, {}], expected {}",
                self.codes.len(),
                self.rows,
                self.cols,
                self.rows * self.cols / 2
            )));
        }
        if self.scales.len() != self.rows * self.cols / nvfp4::GROUP {
            return Err(Error::Shape(format!(
                "{tensor}: {} scales for [{}, {}], expected {}",
                self.scales.len(),
                self.rows,
                self.cols,
                self.rows * self.cols / nvfp4::GROUP
            )));
        }
        if let Some(i) = self
            .scales
            .iter()
            .position(|&s| s & 0x7F == 0x7F || (s & 0x80 != 0 && s != 0x80))
        {
            let what = if self.scales[i] & 0x7F == 0x7F {
                "NaN"
            } else {
                "negative"
            };
            return Err(Error::BadWeights(format!(
                "{tensor}: scale {i} (row {}) is {what} (byte {:#04x})",
                i / (self.cols / nvfp4::GROUP),
                self.scales[i]
            )));
        }
        if !(self.global.is_finite() && self.global > 0.0) {
            return Err(Error::BadWeights(format!(
                "{tensor}: global scale {} must be finite and positive",
                self.global
            )));
        }
        Ok(())
    }

    /// Row-major f32 values (global scale included).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.rows * self.cols);
        for r in 0..self.rows {
            for c in 0..self.cols {
                out.push(nvfp4::modelopt_value(
                    &self.codes,
                    &self.scales,
                    self.global,
                    self.cols,
                    r,
                    c,
                ));
            }
        }
        out
    }

    /// The tiled decode layout: (codes, scales). Needs rows % 16 == 0 and cols % 64 == 0.
    pub fn to_tiled(&self, tensor: &str) -> Result<(Vec<u8>, Vec<u8>)> {
        self.validate(tensor)?;
        if self.rows % TILE_ROWS != 0 || self.cols % TILE_K != 0 {
            return Err(Error::Shape(format!(
                "{tensor}: [{}, {}] does not fit the decode layout (rows must be a multiple of {TILE_ROWS}, columns of {TILE_K})",
                self.rows, self.cols
            )));
        }
        let k_tiles = self.cols / TILE_K;
        // Bit pattern of each (slot, code): a word is the OR of its eight slots' patterns.
        let mut pattern = [[0u32; 16]; 8];
        for (slot, p) in pattern.iter_mut().enumerate() {
            for (code, v) in p.iter_mut().enumerate() {
                *v = nvfp4::put_slot(0, slot, code as u8);
            }
        }
        let tile_bytes = nvfp4::TILE_CODE_BYTES;
        let mut codes = vec![0u8; self.codes.len()];
        let row_tiles = self.rows / TILE_ROWS;
        let threads = std::thread::available_parallelism()
            .map_or(1, |v| v.get())
            .min(row_tiles);
        let per = row_tiles.div_ceil(threads);
        std::thread::scope(|sc| {
            for (i, out) in codes.chunks_mut(per * k_tiles * tile_bytes).enumerate() {
                let pattern = &pattern;
                sc.spawn(move || {
                    for (lt, tile) in out.chunks_exact_mut(tile_bytes).enumerate() {
                        let (rt, kt) = (i * per + lt / k_tiles, lt % k_tiles);
                        for lane in 0..32 {
                            let (g, t) = (lane / 4, lane % 4);
                            for step in 0..4 {
                                let mut w = 0u32;
                                for (slot, p) in pattern.iter().enumerate() {
                                    let row =
                                        rt * TILE_ROWS + g + if slot & 2 != 0 { 8 } else { 0 };
                                    let col = kt * TILE_K
                                        + 16 * step
                                        + 2 * t
                                        + (slot & 1)
                                        + if slot & 4 != 0 { 8 } else { 0 };
                                    w |= p[nvfp4::modelopt_code(&self.codes, self.cols, row, col)
                                        as usize];
                                }
                                tile[lane * 16 + step * 4..][..4].copy_from_slice(&w.to_le_bytes());
                            }
                        }
                    }
                });
            }
        });
        let mut scales = vec![0u8; self.scales.len()];
        let groups = self.cols / nvfp4::GROUP;
        for r in 0..self.rows {
            for gi in 0..groups {
                scales[nvfp4::tiled_scale_pos(r, gi * nvfp4::GROUP, k_tiles)] =
                    self.scales[r * groups + gi];
            }
        }
        Ok((codes, scales))
    }
}

/// What the ggml-style block formats (Q4_K, Q2_0) share: `values` per block of `bytes`, f16
/// scales at the given byte offsets, and a block decoder.
pub(crate) struct BlockFormat {
    pub name: &'static str,
    pub values: usize,
    pub bytes: usize,
    pub scales: &'static [(&'static str, usize)],
    pub decode: fn(&[u8], &mut [f32]),
}

impl BlockFormat {
    /// A non-empty matrix whose rows are whole blocks.
    pub fn check_shape(&self, rows: usize, cols: usize) -> Result<()> {
        if rows == 0 || cols == 0 || cols % self.values != 0 {
            return Err(Error::Shape(format!(
                "{} needs a non-empty matrix with columns a multiple of {}, got [{rows}, {cols}]",
                self.name, self.values
            )));
        }
        Ok(())
    }

    /// The byte count fits the shape, and every block's f16 scales are finite and not negative.
    pub fn validate(&self, tensor: &str, rows: usize, cols: usize, blocks: &[u8]) -> Result<()> {
        self.check_shape(rows, cols)?;
        let want = rows * cols / self.values * self.bytes;
        if blocks.len() != want {
            return Err(Error::Shape(format!(
                "{tensor}: {} bytes for [{rows}, {cols}], expected {want}",
                blocks.len()
            )));
        }
        for (i, b) in blocks.chunks_exact(self.bytes).enumerate() {
            for &(name, at) in self.scales {
                let v = denseffn_device::formats::q4k::f16_to_f32(u16::from_le_bytes([
                    b[at],
                    b[at + 1],
                ]));
                if !v.is_finite() || v < 0.0 {
                    return Err(Error::BadWeights(format!(
                        "{tensor}: block {i} has {name} = {v}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Row-major f32 values of `rows × cols` blocks.
    pub fn dequantize(&self, rows: usize, cols: usize, blocks: &[u8]) -> Vec<f32> {
        let mut out = vec![0f32; rows * cols];
        for (b, o) in blocks
            .chunks_exact(self.bytes)
            .zip(out.chunks_exact_mut(self.values))
        {
            (self.decode)(b, o);
        }
        out
    }
}

/// A quantizer's input: `rows × cols` finite values, else an error naming the first bad one.
pub(crate) fn check_values(w: &[f32], rows: usize, cols: usize) -> Result<()> {
    if w.len() != rows * cols {
        return Err(Error::Shape(format!(
            "weights: {} values for [{rows}, {cols}]",
            w.len()
        )));
    }
    match w.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(Error::BadWeights(format!(
            "weight [{}, {}] is {}",
            i / cols,
            i % cols,
            w[i]
        ))),
        None => Ok(()),
    }
}

fn check_dims(tensor: &str, rows: usize, cols: usize) -> Result<()> {
    if rows == 0 || cols == 0 {
        return Err(Error::Shape(format!(
            "{tensor}: zero-sized [{rows}, {cols}]"
        )));
    }
    if cols % nvfp4::GROUP != 0 {
        return Err(Error::Shape(format!(
            "{tensor}: {cols} columns is not a multiple of the NVFP4 group ({})",
            nvfp4::GROUP
        )));
    }
    Ok(())
}

/// Random bf16-representable activations, N(0, 1), as f32 (never all zero).
pub fn random_activations(len: usize, rng: &mut impl RngCore) -> Vec<f32> {
    (0..len)
        .map(|_| {
            // Box–Muller from two uniforms: enough for test inputs, no extra dependency.
            let (u1, u2): (f32, f32) = (rng.random_range(1e-7..1.0), rng.random());
            let v = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos();
            half::bf16::from_f32(v).to_f32()
        })
        .collect()
}

#[cfg(test)]
mod ggml_nvfp4_tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    /// ggml's definition, restated: `kvalues_mxfp4[q] · ue4m3_half(d)`, the table doubled and
    /// the scale decode halved (0x00 and 0x7F decode to 0; bit 7 ignored).
    fn ggml_value(block: &[u8], i: usize) -> f32 {
        const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
        let (s, j) = (i / 16, i % 16);
        let d = block[s];
        let half = if d == 0 || d == 0x7F {
            0.0
        } else {
            let (e, m) = (((d >> 3) & 0xF) as i32, (d & 7) as f32);
            let raw = if e == 0 {
                m * 2f32.powi(-9)
            } else {
                (1.0 + m / 8.0) * 2f32.powi(e - 7)
            };
            raw * 0.5
        };
        let byte = block[4 + 8 * s + j % 8];
        let q = if j < 8 { byte & 0xF } else { byte >> 4 };
        KVALUES[q as usize] as f32 * half
    }

    #[test]
    fn ggml_blocks_import_to_the_same_values() {
        let mut rng = SmallRng::seed_from_u64(9);
        let (rows, cols) = (3, 128);
        let mut blocks = vec![0u8; rows * cols / 64 * 36];
        rng.fill_bytes(&mut blocks);
        for (b, blk) in blocks.chunks_exact_mut(36).enumerate() {
            for (s, d) in blk[..4].iter_mut().enumerate() {
                // random normal/subnormal scales, bit 7 sometimes set, the 0x7F zero code once
                *d = match (b + s) % 7 {
                    0 => 0x7F,
                    1 => 0x03,
                    _ => (*d % 0x70) | (*d & 0x80),
                };
            }
        }
        let w = Nvfp4Host::from_ggml_nvfp4("t", rows, cols, &blocks).unwrap();
        let got = w.dequantize();
        for r in 0..rows {
            for c in 0..cols {
                let blk = &blocks[(r * cols + c) / 64 * 36..][..36];
                assert_eq!(got[r * cols + c], ggml_value(blk, c % 64), "[{r}, {c}]");
            }
        }
    }

    #[test]
    fn bad_ggml_blocks_are_errors() {
        let ok = vec![0x11u8; 36];
        assert!(matches!(
            Nvfp4Host::from_ggml_nvfp4("t", 1, 64, &ok[..35]),
            Err(Error::Shape(_))
        ));
        assert!(matches!(
            Nvfp4Host::from_ggml_nvfp4("t", 1, 32, &ok),
            Err(Error::Shape(_))
        ));
        let mut bad = ok.clone();
        bad[2] = 0xFF;
        let e = Nvfp4Host::from_ggml_nvfp4("blk.0.ffn_up.weight", 1, 64, &bad).unwrap_err();
        assert!(
            matches!(e, Error::BadWeights(_)) && e.to_string().contains("ffn_up"),
            "{e}"
        );
    }
}
