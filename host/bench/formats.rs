//! The weight formats `denseffn bench` measures, as one list: adding a format is one line in
//! [`FORMATS`] (plus, for a new overlay, a `synth` function making random weights of it).
//! `nvfp4_lora16` / `nvfp4_lora64` are the NVFP4 layer with LoRA deltas of that rank: beside the
//! `nvfp4` rows they give LoRA's overhead per path.
use super::synth;
use crate::layer::{DenseFfnLayer, OverlayKind, PrefillConfig};
use crate::Result;
use rand::rngs::SmallRng;

/// One measured format.
pub struct BenchFormat {
    /// Name in tables, plots and `--formats`.
    pub name: &'static str,
    /// The ggml type whose H200 MUL_MAT figures are drawn beside it (the nearest ggml has).
    pub ggml: &'static str,
    /// Puts random weights of this format on a random NVFP4 layer (no-op for NVFP4 itself).
    pub install: fn(&mut DenseFfnLayer, &mut SmallRng) -> Result<()>,
    /// Takes them off again, leaving the NVFP4 layer.
    pub remove: fn(&mut DenseFfnLayer),
}

/// Every format, in table order.
#[rustfmt::skip]
pub const FORMATS: &[BenchFormat] = &[
    BenchFormat { name: "nvfp4", ggml: "nvfp4", install: |_, _| Ok(()), remove: |_| {} },
    BenchFormat { name: "fp8", ggml: "q8_0", install: |l, r| overlay(l, r, synth::fp8, DenseFfnLayer::set_fp8_weights), remove: |l| l.clear_overlay(OverlayKind::Fp8) },
    BenchFormat { name: "bf16", ggml: "bf16", install: |l, r| overlay(l, r, synth::dense, DenseFfnLayer::set_bf16_weights), remove: |l| l.clear_overlay(OverlayKind::Bf16) },
    BenchFormat { name: "q2_0", ggml: "q2_0", install: |l, r| overlay(l, r, synth::q2, DenseFfnLayer::set_q2_weights), remove: |l| l.clear_overlay(OverlayKind::Q2) },
    BenchFormat { name: "q4k", ggml: "q4_K", install: |l, r| overlay(l, r, synth::q4k, DenseFfnLayer::set_q4k_weights), remove: |l| l.clear_overlay(OverlayKind::Q4k) },
    BenchFormat { name: "nvfp4_lora16", ggml: "nvfp4", install: |l, r| lora(l, r, 16), remove: DenseFfnLayer::clear_lora },
    BenchFormat { name: "nvfp4_lora64", ggml: "nvfp4", install: |l, r| lora(l, r, 64), remove: DenseFfnLayer::clear_lora },
    BenchFormat { name: "q4k_mmq", ggml: "q4_K", install: q4k_mmq, remove: |l| { l.clear_overlay(OverlayKind::Q4k); l.set_prefill_config(PrefillConfig::default()) } },
    BenchFormat { name: "nvfp4_mmq", ggml: "nvfp4", install: |l, _| nvfp4_mmq(l), remove: undo_nvfp4_mmq },
    BenchFormat { name: "fp8_w8a8", ggml: "q8_0", install: fp8_w8a8, remove: |l| { l.clear_overlay(OverlayKind::Fp8); l.set_prefill_config(PrefillConfig::default()) } },
];

/// The FP8 overlay with the FP8 × FP8 `w8a8_gemm` prefill arm enabled (decode as `fp8`).
fn fp8_w8a8(l: &mut DenseFfnLayer, r: &mut SmallRng) -> Result<()> {
    l.set_prefill_config(PrefillConfig {
        w8a8: true,
        ..PrefillConfig::default()
    });
    overlay(l, r, synth::fp8, DenseFfnLayer::set_fp8_weights)
}

/// The NVFP4 layer with the W4A4 `nvfp4_mmq` prefill arm enabled and finalized (decode as
/// `nvfp4`); removing it rebuilds the gate/up `_t` copies.
fn nvfp4_mmq(l: &mut DenseFfnLayer) -> Result<()> {
    l.set_prefill_config(PrefillConfig {
        nvfp4_mmq: true,
        ..PrefillConfig::default()
    });
    let (gpu, h, i) = (l.gpu().clone(), l.hidden(), l.intermediate());
    l.finalize_nvfp4_mmq_load(&gpu, h, i, 0)
}

/// Native Q4_K weights installed with the `q4k_mmq` prefill arm enabled (decode as `q4k`).
fn q4k_mmq(l: &mut DenseFfnLayer, r: &mut SmallRng) -> Result<()> {
    l.set_prefill_config(PrefillConfig {
        q4k_mmq: true,
        ..PrefillConfig::default()
    });
    overlay(l, r, synth::q4k, DenseFfnLayer::set_q4k_weights)
}

/// Disables the arm and rebuilds the gate/up `_t` copies (on failure the following formats'
/// prefill rows say why).
fn undo_nvfp4_mmq(l: &mut DenseFfnLayer) {
    l.set_prefill_config(PrefillConfig::default());
    if let Err(e) = l.undo_nvfp4_mmq_load(0) {
        tracing::warn!("bench: restoring the `_t` copies after nvfp4_mmq: {e}");
    }
}

/// The format named `name`.
pub fn find(name: &str) -> Option<&'static BenchFormat> {
    FORMATS.iter().find(|f| f.name.eq_ignore_ascii_case(name))
}

/// Bytes the decode paths read once per call: the active overlay's weights, else the NVFP4
/// decode copies and the LoRA matrices, if any.
pub fn weight_bytes(layer: &DenseFfnLayer) -> usize {
    let f = layer.footprint();
    match layer.active_overlay() {
        Some(_) => f.overlays,
        None => f.decode_weights + f.lora,
    }
}

/// Installs random LoRA deltas of `rank` (alpha = 2·rank) on the NVFP4 layer `l`.
fn lora(l: &mut DenseFfnLayer, rng: &mut SmallRng, rank: usize) -> Result<()> {
    let w = synth::lora(l.hidden(), l.intermediate(), rank, rng);
    l.set_lora_weights(w)
}

/// Makes random gate `[i, h]`, up `[i, h]` and down `[h, i]` with `make` and installs them on
/// `l` with `set` (one of the layer's `set_*_weights`).
pub fn overlay<W>(
    l: &mut DenseFfnLayer,
    rng: &mut SmallRng,
    make: fn(usize, usize, &mut SmallRng) -> W,
    set: fn(&mut DenseFfnLayer, &W, &W, &W) -> Result<()>,
) -> Result<()> {
    let (h, i) = (l.hidden(), l.intermediate());
    let (gate, up, down) = (make(i, h, rng), make(i, h, rng), make(h, i, rng));
    set(l, &gate, &up, &down)
}
