//! `DenseFfnLayer`: the FFN block `down(act(gate·x) ⊙ up·x)` over device weights, and the
//! choice of kernels per call.
mod context;
pub mod plan;
mod weights;

pub use context::{ForwardContext, MAX_GEMV_TOKENS};
pub use weights::{DenseFfnWeights, Nvfp4Weight};

use crate::backend::{DevicePtr, GpuBackend, Launch};
use crate::error::{Error, Result};
use denseffn_device::params::{source, ElementwiseParams, GemvParams, ParamBlock};
use plan::GemvPlan;
use std::sync::Arc;

/// The activation between the gate and the up projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FfnActivation {
    /// `silu(g)·u` (Llama, Qwen, Mistral).
    #[default]
    Silu,
    /// `gelu_tanh(g)·u` (Gemma).
    Gelu,
}

/// Kernel entry points used by the decode paths.
pub mod kernels {
    /// Dual GEMV: gate and up from one read of x.
    pub const GATE_UP: &str = "gemv_nvfp4_gate_up";
    /// Down GEMV with silu(g)·u computed while staging.
    pub const SILU_DOWN: &str = "gemv_nvfp4_silu_down";
    /// Plain down GEMV over an activated f32 input.
    pub const DOWN: &str = "gemv_nvfp4_down";
    /// `gelu_tanh(g)·u`.
    pub const GELU_MUL: &str = "gelu_mul";
    /// `silu(g)·u`.
    pub const SILU_MUL: &str = "silu_mul";
}

/// A dense FFN layer on one device.
///
/// Inputs and outputs are bf16 `[tokens][hidden]` device buffers; accumulation is f32.
pub struct DenseFfnLayer {
    weights: DenseFfnWeights,
    activation: FfnActivation,
    gpu: Arc<dyn GpuBackend>,
}

impl DenseFfnLayer {
    /// A SiLU layer over NVFP4 weights.
    pub fn new(weights: DenseFfnWeights, gpu: Arc<dyn GpuBackend>) -> Result<Self> {
        Self::new_with_activation(weights, FfnActivation::Silu, gpu)
    }

    /// A layer with the given activation. Checks that the three projections agree in shape.
    pub fn new_with_activation(
        weights: DenseFfnWeights,
        activation: FfnActivation,
        gpu: Arc<dyn GpuBackend>,
    ) -> Result<Self> {
        let (h, i) = (weights.hidden, weights.intermediate);
        for (name, w, rows, cols) in [
            ("gate", &weights.gate, i, h),
            ("up", &weights.up, i, h),
            ("down", &weights.down, h, i),
        ] {
            if (w.rows, w.cols) != (rows, cols) {
                return Err(Error::Shape(format!(
                    "{name} is [{}, {}], expected [{rows}, {cols}]",
                    w.rows, w.cols
                )));
            }
        }
        Ok(DenseFfnLayer {
            weights,
            activation,
            gpu,
        })
    }

    /// Model width.
    pub fn hidden(&self) -> usize {
        self.weights.hidden
    }

    /// FFN width.
    pub fn intermediate(&self) -> usize {
        self.weights.intermediate
    }

    /// The activation.
    pub fn activation(&self) -> FfnActivation {
        self.activation
    }

    /// The weights.
    pub fn weights(&self) -> &DenseFfnWeights {
        &self.weights
    }

    /// The backend the layer runs on.
    pub fn gpu(&self) -> &Arc<dyn GpuBackend> {
        &self.gpu
    }

    /// Kernels `forward` launches, in order: SiLU 2 (gate_up, silu_down), GELU 3 (gate_up,
    /// gelu_mul, down).
    pub fn decode_kernels(&self) -> &'static [&'static str] {
        match self.activation {
            FfnActivation::Silu => &[kernels::GATE_UP, kernels::SILU_DOWN],
            FfnActivation::Gelu => &[kernels::GATE_UP, kernels::GELU_MUL, kernels::DOWN],
        }
    }

    /// One token: bf16 `[hidden]` at `input` → bf16 `[hidden]` at the returned pointer (the
    /// start of `ctx`'s output buffer). SiLU: 2 launches; GELU: 3.
    pub fn forward(
        &self,
        input: DevicePtr,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        self.check_ctx(ctx)?;
        self.check_input(input, 1)?;
        self.require(self.decode_kernels())?;
        self.decode_into(input, ctx.out.ptr(), 1, ctx, stream)?;
        Ok(ctx.out.ptr())
    }

    /// `num_tokens` tokens one after another through [`DenseFfnLayer::forward`]'s kernels (the
    /// per-token loop, for comparison with batched paths): bf16 `[num_tokens][hidden]` out.
    pub fn forward_batched(
        &self,
        input: DevicePtr,
        num_tokens: usize,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        self.check_ctx(ctx)?;
        if num_tokens == 0 || num_tokens > ctx.max_tokens {
            return Err(Error::Invalid(format!(
                "forward_batched: {num_tokens} tokens, the context holds 1..={}",
                ctx.max_tokens
            )));
        }
        self.check_input(input, num_tokens)?;
        self.require(self.decode_kernels())?;
        let row = self.hidden() * 2;
        for t in 0..num_tokens {
            self.decode_into(
                input.offset(t * row),
                ctx.out.ptr().offset(t * row),
                1,
                ctx,
                stream,
            )?;
        }
        Ok(ctx.out.ptr())
    }

    /// Launches the decode kernels for `m` ≤ 8 tokens, writing bf16 `[m][hidden]` to `out`.
    fn decode_into(
        &self,
        input: DevicePtr,
        out: DevicePtr,
        m: usize,
        ctx: &ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let (h, i) = (self.hidden(), self.intermediate());
        let w = &self.weights;
        let sms = self.gpu.sm_count();
        let mut gu = GemvParams {
            w0: w.gate.codes.ptr().0,
            s0: w.gate.scales.ptr().0,
            w1: w.up.codes.ptr().0,
            s1: w.up.scales.ptr().0,
            act0: input.0,
            out0: ctx.g.ptr().0,
            out1: ctx.u.ptr().0,
            ws: ctx.ws.ptr().0,
            counters: ctx.counters.ptr().0,
            gscale0: w.gate.global,
            gscale1: w.up.global,
            n: i as u32,
            k: h as u32,
            m: m as u32,
            source: source::BF16,
            ..Default::default()
        };
        self.gpu.launch(
            &GemvPlan::new(i, h, m, sms).launch(kernels::GATE_UP, &mut gu),
            stream,
        )?;
        let mut down = GemvParams {
            w0: w.down.codes.ptr().0,
            s0: w.down.scales.ptr().0,
            out0: out.0,
            ws: ctx.ws.ptr().0,
            counters: ctx.counters.ptr().0,
            gscale0: w.down.global,
            n: h as u32,
            k: i as u32,
            m: m as u32,
            out_bf16: 1,
            ..Default::default()
        };
        let down_kernel = match self.activation {
            FfnActivation::Silu => {
                down.act0 = ctx.g.ptr().0;
                down.act1 = ctx.u.ptr().0;
                down.source = source::SILU_F32;
                kernels::SILU_DOWN
            }
            FfnActivation::Gelu => {
                let len = (m * i) as u32;
                let ew = ElementwiseParams {
                    g: ctx.g.ptr().0,
                    u: ctx.u.ptr().0,
                    out: ctx.a.ptr().0,
                    len,
                    _pad: 0,
                };
                self.gpu.launch(
                    &Launch {
                        kernel: kernels::GELU_MUL,
                        grid: (len.div_ceil(1024), 1, 1),
                        block: (256, 1, 1),
                        smem: 0,
                        params: ew.as_bytes(),
                    },
                    stream,
                )?;
                down.act0 = ctx.a.ptr().0;
                down.source = source::F32;
                kernels::DOWN
            }
        };
        self.gpu.launch(
            &GemvPlan::new(h, i, m, sms).launch(down_kernel, &mut down),
            stream,
        )
    }

    /// Every kernel in `names` is in the loaded module, else an error naming the first missing.
    fn require(&self, names: &[&'static str]) -> Result<()> {
        match names.iter().find(|n| !self.gpu.has_kernel(n)) {
            Some(n) => Err(Error::MissingKernel((*n).into())),
            None => Ok(()),
        }
    }

    fn check_ctx(&self, ctx: &ForwardContext) -> Result<()> {
        if (ctx.hidden, ctx.intermediate) != (self.hidden(), self.intermediate()) {
            return Err(Error::Invalid(format!(
                "ForwardContext was made for hidden {} / intermediate {}, the layer is {} / {}",
                ctx.hidden,
                ctx.intermediate,
                self.hidden(),
                self.intermediate()
            )));
        }
        Ok(())
    }

    fn check_input(&self, input: DevicePtr, tokens: usize) -> Result<()> {
        let need = tokens * self.hidden() * 2;
        match self.gpu.bytes_from(input) {
            None => Err(Error::BadAccess(format!("input {:#x} is not in any device allocation", input.0))),
            Some(have) if have < need => Err(Error::Invalid(format!(
                "input: {have} bytes from the pointer to the end of its allocation, {tokens} token(s) of bf16 [{}] need {need}",
                self.hidden()
            ))),
            Some(_) => Ok(()),
        }
    }
}
