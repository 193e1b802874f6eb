//! The weight formats `denseffn bench` measures, as one list: adding a format is one line in
//! [`FORMATS`] (plus, for a new overlay, the function that installs random weights of it).
use super::synth;
use crate::layer::{DenseFfnLayer, OverlayKind};
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
    BenchFormat { name: "fp8", ggml: "q8_0", install: install_fp8, remove: |l| l.clear_overlay(OverlayKind::Fp8) },
    BenchFormat { name: "bf16", ggml: "bf16", install: install_bf16, remove: |l| l.clear_overlay(OverlayKind::Bf16) },
    BenchFormat { name: "q2_0", ggml: "q2_0", install: install_q2, remove: |l| l.clear_overlay(OverlayKind::Q2) },
];

/// The format named `name`.
pub fn find(name: &str) -> Option<&'static BenchFormat> {
    FORMATS.iter().find(|f| f.name.eq_ignore_ascii_case(name))
}

/// Bytes the decode paths read once per call: the active overlay's weights, else the NVFP4
/// decode copies.
pub fn weight_bytes(layer: &DenseFfnLayer) -> usize {
    let f = layer.footprint();
    match layer.active_overlay() {
        Some(_) => f.overlays,
        None => f.decode_weights,
    }
}

fn install_fp8(l: &mut DenseFfnLayer, rng: &mut SmallRng) -> Result<()> {
    let (h, i) = (l.hidden(), l.intermediate());
    let (g, u, d) = (
        synth::fp8(i, h, rng),
        synth::fp8(i, h, rng),
        synth::fp8(h, i, rng),
    );
    l.set_fp8_weights(&g, &u, &d)
}

fn install_bf16(l: &mut DenseFfnLayer, rng: &mut SmallRng) -> Result<()> {
    let (h, i) = (l.hidden(), l.intermediate());
    let (g, u, d) = (
        synth::dense(i, h, rng),
        synth::dense(i, h, rng),
        synth::dense(h, i, rng),
    );
    l.set_bf16_weights(&g, &u, &d)
}

fn install_q2(l: &mut DenseFfnLayer, rng: &mut SmallRng) -> Result<()> {
    let (h, i) = (l.hidden(), l.intermediate());
    let (g, u, d) = (
        synth::q2(i, h, rng),
        synth::q2(i, h, rng),
        synth::q2(h, i, rng),
    );
    l.set_q2_weights(&g, &u, &d)
}
