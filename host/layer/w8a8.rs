//! The FP8 × FP8 prefill arm (`w8a8_gemm`) of a layer with an FP8 overlay: activations
//! quantized per token to E4M3, products on Hopper's FP8 tensor cores (twice the bf16 rate),
//! over the overlay's own tiles (no extra weight copy).
//!
//! Launches per `forward_prefill` call: 4 — `quantize_e4m3_act` (the input: per token a
//! power-of-two scale and E4M3 codes), `w8a8_gemm_gate_up_act` (gate and up, the activation
//! fused, bf16 `act(g)·u` out), `quantize_e4m3_act` (that intermediate), `w8a8_gemm` (down,
//! bf16 out).
//!
//! Accuracy: the activations carry E4M3's 3 mantissa bits (relative rounding ≤ 2^-4 per value)
//! on top of the weights' own FP8 rounding; the bound the tests hold it to is measured and
//! stated there (`tests/cpu_overlays.rs`, `tests/gpu.rs`). Off by default: enable it with
//! [`super::PrefillConfig::w8a8`] or [`W8A8_ENV`]`=1`.
use super::{DenseFfnLayer, ForwardContext, Proj};
use crate::backend::DevicePtr;
use crate::error::{Error, Result};
use denseffn_device::params::{GemmParams, Q8_THREADS};

/// The environment variable that enables the `w8a8_gemm` arm when set to `1` (read by
/// [`super::PrefillConfig::from_env`], the default of every new layer).
pub const W8A8_ENV: &str = "DENSEFFN_FFN_W8A8";

/// The FP8 × FP8 arm's kernel entry points.
pub mod kernels {
    /// Activations bf16 → E4M3 per token (power-of-two scale), f32 inverse scales.
    pub const QUANTIZE: &str = "quantize_e4m3_act";
    /// Gate+up FP8 × FP8 with the activation fused, bf16 out.
    pub const GATE_UP: &str = "w8a8_gemm_gate_up_act";
    /// One projection (down) FP8 × FP8, bf16 out.
    pub const DOWN: &str = "w8a8_gemm";
    /// All of them, in launch order.
    pub const ALL: [&str; 4] = [QUANTIZE, GATE_UP, QUANTIZE, DOWN];
}

impl DenseFfnLayer {
    /// The `w8a8_gemm` arm: quantize, gate+up, quantize, down (4 launches).
    pub(crate) fn prefill_w8a8(
        &self,
        input: DevicePtr,
        n: usize,
        ctx: &ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let (gate, up, down) = self.prefill_weights(super::PrefillArm::W8a8Gemm)?;
        let s = ctx.mmq.as_ref().ok_or_else(|| {
            Error::Invalid(
                "forward_prefill: this ForwardContext has no w8a8_gemm scratch (it was made before the arm was enabled): make a new one".into(),
            )
        })?;
        let (h, i) = (self.hidden(), self.intermediate());
        if s.width < h.max(i) {
            return Err(Error::Invalid(
                "forward_prefill: this ForwardContext's quantized-activation scratch is narrower than the intermediate size (made before w8a8_gemm was enabled): make a new one".into(),
            ));
        }
        let act = match self.activation() {
            super::FfnActivation::Silu => 1,
            super::FfnActivation::Gelu => 2,
        };
        let (q, d) = (s.q.ptr().0, s.d.ptr().0);
        // The second quantizer and both GEMMs are programmatic dependents of the launch before
        // them (each waits for it before reading its input).
        let quantize = |x: DevicePtr, k: usize, dependent: bool| {
            self.launch_token_quantize(
                kernels::QUANTIZE,
                Q8_THREADS,
                (x, k, n),
                s,
                (stream, dependent),
            )
        };
        let params = |w: &Proj, x_out: DevicePtr| GemmParams {
            w0: w.codes,
            s0: w.scales,
            gscale0: w.global,
            x: q,
            x_scales: d,
            out: x_out.0,
            n: w.rows as u32,
            k: w.cols as u32,
            tokens: n as u32,
            ..Default::default()
        };
        quantize(input, h, false)?;
        let gu = GemmParams {
            w1: up.codes,
            s1: up.scales,
            gscale1: up.global,
            act,
            ..params(&gate, ctx.prefill_act.ptr())
        };
        self.launch_gemm(kernels::GATE_UP, &gu, ctx, stream)?;
        quantize(ctx.prefill_act.ptr(), i, true)?;
        self.launch_gemm(kernels::DOWN, &params(&down, ctx.out.ptr()), ctx, stream)
    }
}
