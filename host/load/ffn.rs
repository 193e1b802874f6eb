//! One layer's FFN weights from any checkpoint this crate reads, as the weight set the layer runs
//! them with: [`load_ffn`] picks the loader from the file, [`HostFfn::layer`] builds the layer.
//!
//! | source | tensors | weight set |
//! |---|---|---|
//! | safetensors | `weight` U8 + `weight_scale` F8_E4M3 + `weight_scale_2` | NVFP4 (the layer's own weights) |
//! | safetensors | `weight` F8_E4M3 + `weight_scale_inv` | FP8 overlay |
//! | safetensors | `weight` BF16 | BF16 overlay |
//! | GGUF | all three NVFP4 | NVFP4 |
//! | GGUF | all three Q4_K | Q4_K overlay |
//! | GGUF | all three Q2_0 | Q2_0 overlay |
//! | GGUF | F32/F16/BF16, or a mix of types | BF16 overlay of the values (F32/F16 rounded to bf16) |
//!
//! Overlay layers are built on placeholder NVFP4 weights
//! ([`DenseFfnWeights::placeholder`]), so no NVFP4 kernel ever reads them.
use super::gguf::{load_ffn_gguf, GgufWeight};
use super::{load_bf16_layer, load_fp8_layer, load_nvfp4_layer};
use crate::backend::GpuBackend;
use crate::error::{Error, Result};
use crate::layer::{
    DenseFfnLayer, DenseFfnWeights, DenseWeight, FfnActivation, Fp8Weight, PackedQ2Weight,
    Q4kWeight,
};
use crate::pack::Nvfp4Host;
use half::bf16;
use std::path::Path;
use std::sync::Arc;

/// gate, up, down of one format.
#[derive(Clone, Debug, PartialEq)]
pub enum HostFfn {
    /// NVFP4 (ModelOpt layout).
    Nvfp4([Nvfp4Host; 3]),
    /// FP8 block-scaled.
    Fp8([Fp8Weight; 3]),
    /// BF16.
    Bf16([DenseWeight; 3]),
    /// ggml Q2_0.
    Q2([PackedQ2Weight; 3]),
    /// ggml Q4_K.
    Q4k([Q4kWeight; 3]),
}

impl HostFfn {
    /// The weight set's name (`nvfp4`, `fp8`, `bf16`, `q2_0`, `q4k`).
    pub fn format(&self) -> &'static str {
        match self {
            HostFfn::Nvfp4(_) => "nvfp4",
            HostFfn::Fp8(_) => "fp8",
            HostFfn::Bf16(_) => "bf16",
            HostFfn::Q2(_) => "q2_0",
            HostFfn::Q4k(_) => "q4k",
        }
    }

    /// (hidden, intermediate): gate's (columns, rows).
    pub fn dims(&self) -> (usize, usize) {
        let (r, c) = match self {
            HostFfn::Nvfp4(w) => (w[0].rows, w[0].cols),
            HostFfn::Fp8(w) => (w[0].rows, w[0].cols),
            HostFfn::Bf16(w) => (w[0].rows, w[0].cols),
            HostFfn::Q2(w) => (w[0].rows, w[0].cols),
            HostFfn::Q4k(w) => (w[0].rows, w[0].cols),
        };
        (c, r)
    }

    /// gate, up, down as row-major f32, the exact values the format defines (the f64
    /// reference's input).
    pub fn values(&self) -> [Vec<f32>; 3] {
        match self {
            HostFfn::Nvfp4(w) => w.each_ref().map(|w| w.dequantize()),
            HostFfn::Fp8(w) => w.each_ref().map(|w| w.dequantize()),
            HostFfn::Bf16(w) => w
                .each_ref()
                .map(|w| w.data.iter().map(|v| v.to_f32()).collect()),
            HostFfn::Q2(w) => w.each_ref().map(|w| w.dequantize()),
            HostFfn::Q4k(w) => w.each_ref().map(|w| w.dequantize()),
        }
    }

    /// A layer on `gpu` running these weights: NVFP4 as the layer's own weights, any other
    /// format as an overlay on placeholder NVFP4 weights.
    pub fn layer(&self, gpu: &Arc<dyn GpuBackend>, act: FfnActivation) -> Result<DenseFfnLayer> {
        let (h, i) = self.dims();
        if let HostFfn::Nvfp4([g, u, d]) = self {
            let w = DenseFfnWeights::upload(gpu, g, u, d)?;
            return DenseFfnLayer::new_with_activation(w, act, gpu.clone());
        }
        let w = DenseFfnWeights::placeholder(gpu, h, i)?;
        let mut layer = DenseFfnLayer::new_with_activation(w, act, gpu.clone())?;
        match self {
            HostFfn::Fp8([g, u, d]) => layer.set_fp8_weights(g, u, d)?,
            HostFfn::Bf16([g, u, d]) => layer.set_bf16_weights(g, u, d)?,
            HostFfn::Q2([g, u, d]) => layer.set_q2_weights(g, u, d)?,
            HostFfn::Q4k([g, u, d]) => layer.set_q4k_weights(g, u, d)?,
            HostFfn::Nvfp4(_) => {}
        }
        Ok(layer)
    }
}

/// Loads layer `layer`'s FFN from a GGUF file (by name or magic) or a safetensors checkpoint
/// (file, index or directory; the format from the dtype of `gate_proj.weight`), as the table in
/// the module documentation says. Errors name the file or tensor.
pub fn load_ffn(path: &Path, layer: usize) -> Result<HostFfn> {
    if is_gguf(path) {
        return from_gguf(path, layer);
    }
    let list = super::inspect(path)?;
    let gate = format!("model.layers.{layer}.mlp.gate_proj.weight");
    let dtype = list
        .iter()
        .find(|t| t.name == gate)
        .map(|t| t.dtype.as_str());
    Ok(match dtype {
        Some("U8") => {
            let (g, u, d) = load_nvfp4_layer(path, layer)?;
            HostFfn::Nvfp4([g, u, d])
        }
        Some("F8_E4M3") => {
            let (g, u, d) = load_fp8_layer(path, layer)?;
            HostFfn::Fp8([g, u, d])
        }
        Some("BF16") => {
            let (g, u, d) = load_bf16_layer(path, layer)?;
            HostFfn::Bf16([g, u, d])
        }
        Some(other) => {
            return Err(Error::Unsupported(format!(
                "{gate} ({}) has dtype {other}: FFN weights are read as NVFP4 (U8 codes), FP8 (F8_E4M3) or BF16",
                path.display()
            )))
        }
        // The NVFP4 loader gives the precise error (layer out of range, tensor missing, ...).
        None => {
            let (g, u, d) = load_nvfp4_layer(path, layer)?;
            HostFfn::Nvfp4([g, u, d])
        }
    })
}

/// Whether `path` is a GGUF file: named `*.gguf`, or a file starting with the GGUF magic.
pub fn is_gguf(path: &Path) -> bool {
    path.extension()
        .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
        || path.is_file()
            && std::fs::File::open(path)
                .and_then(|mut f| {
                    let mut m = [0u8; 4];
                    std::io::Read::read_exact(&mut f, &mut m).map(|_| m == *b"GGUF")
                })
                .unwrap_or(false)
}

fn from_gguf(path: &Path, layer: usize) -> Result<HostFfn> {
    let f = load_ffn_gguf(path, layer)?;
    Ok(match [f.gate, f.up, f.down] {
        [GgufWeight::Nvfp4(g), GgufWeight::Nvfp4(u), GgufWeight::Nvfp4(d)] => {
            HostFfn::Nvfp4([g, u, d])
        }
        [GgufWeight::Q4K(g), GgufWeight::Q4K(u), GgufWeight::Q4K(d)] => HostFfn::Q4k([g, u, d]),
        [GgufWeight::Q2(g), GgufWeight::Q2(u), GgufWeight::Q2(d)] => HostFfn::Q2([g, u, d]),
        parts => HostFfn::Bf16(parts.map(|w| DenseWeight {
            rows: w.rows(),
            cols: w.cols(),
            data: w.dequantize().into_iter().map(bf16::from_f32).collect(),
        })),
    })
}
