//! The FP8 × FP8 prefill arm (`w8a8_gemm`) of a layer with an FP8 overlay: activations
//! quantized per token to E4M3, products on Hopper's FP8 tensor cores (twice the bf16 rate),
//! over the overlay's own tiles (no extra weight copy). The overlay's default arm
//! (`w8a16_gemm`) runs the same way with f16 activations (bf16's precision kept) on the f16
//! tensor cores.
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

/// The FP8 × bf16 arm's kernel entry points (`w8a16_gemm`, the FP8 overlay's default prefill):
/// the same persistent GEMMs over f16 activations, which keep bf16's precision.
pub mod a16_kernels {
    /// Activations bf16 → f16 per token (power-of-two scale, so nothing overflows f16), f32
    /// inverse scales; in place for the intermediate.
    pub const QUANTIZE: &str = "quantize_f16_act";
    /// Gate+up FP8 × f16 with the activation fused, bf16 out.
    pub const GATE_UP: &str = "w8a16_gemm_gate_up_act";
    /// One projection (down) FP8 × f16, bf16 out.
    pub const DOWN: &str = "w8a16_gemm";
    /// All of them, in launch order.
    pub const ALL: [&str; 4] = [QUANTIZE, GATE_UP, QUANTIZE, DOWN];
}

impl DenseFfnLayer {
    /// The `w8a8_gemm` arm (`a16` off) or the `w8a16_gemm` arm: quantize, gate+up, quantize,
    /// down (4 launches). The FP8 × FP8 arm's E4M3 codes and scales go to the context's MMQ
    /// scratch; the FP8 × bf16 arm's f16 input to the output buffer (which down overwrites
    /// last), its f16 intermediate over the bf16 one (in place), its scales to `act_scales`.
    pub(crate) fn prefill_fp8(
        &self,
        a16: bool,
        input: DevicePtr,
        n: usize,
        ctx: &ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let arm = if a16 {
            super::PrefillArm::Fp8Gemm
        } else {
            super::PrefillArm::W8a8Gemm
        };
        let (gate, up, down) = self.prefill_weights(arm)?;
        let (h, i) = (self.hidden(), self.intermediate());
        let act_buf = ctx.prefill_act.ptr();
        // (quantize kernel, GEMMs, the quantized input, the quantized intermediate, scales)
        let (quantize_kernel, gate_up_kernel, down_kernel, xq, aq, d) = if a16 {
            (
                a16_kernels::QUANTIZE,
                a16_kernels::GATE_UP,
                a16_kernels::DOWN,
                ctx.out.ptr(),
                act_buf,
                ctx.act_scales.ptr(),
            )
        } else {
            let s = ctx.mmq.as_ref().ok_or_else(|| {
                Error::Invalid(
                    "forward_prefill: this ForwardContext has no w8a8_gemm scratch (it was made before the arm was enabled): make a new one".into(),
                )
            })?;
            if s.width < h.max(i) {
                return Err(Error::Invalid(
                    "forward_prefill: this ForwardContext's quantized-activation scratch is narrower than the intermediate size (made before w8a8_gemm was enabled): make a new one".into(),
                ));
            }
            (
                kernels::QUANTIZE,
                kernels::GATE_UP,
                kernels::DOWN,
                s.q.ptr(),
                s.q.ptr(),
                s.d.ptr(),
            )
        };
        let act = match self.activation() {
            super::FfnActivation::Silu => 1,
            super::FfnActivation::Gelu => 2,
        };
        // The second quantizer and both GEMMs are programmatic dependents of the launch before
        // them (each waits for it before reading its input).
        let quantize = |x: DevicePtr, q: DevicePtr, k: usize, dependent: bool| {
            self.launch_token_quantize(
                quantize_kernel,
                Q8_THREADS,
                (x, k, n),
                (q, d),
                (stream, dependent),
            )
        };
        let params = |w: &Proj, x: DevicePtr, x_out: DevicePtr| GemmParams {
            w0: w.codes,
            s0: w.scales,
            gscale0: w.global,
            x: x.0,
            x_scales: d.0,
            out: x_out.0,
            n: w.rows as u32,
            k: w.cols as u32,
            tokens: n as u32,
            ..Default::default()
        };
        quantize(input, xq, h, false)?;
        let gu = GemmParams {
            w1: up.codes,
            s1: up.scales,
            gscale1: up.global,
            act,
            ..params(&gate, xq, act_buf)
        };
        self.launch_gemm(gate_up_kernel, &gu, ctx, stream)?;
        quantize(act_buf, aq, i, true)?;
        self.launch_gemm(down_kernel, &params(&down, aq, ctx.out.ptr()), ctx, stream)
    }
}
