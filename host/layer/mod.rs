//! `DenseFfnLayer`: the FFN block `down(act(gate·x) ⊙ up·x)` over device weights, and the
//! choice of kernels per call.
mod context;
mod footprint;
mod lora;
mod mmq;
mod nvfp4_mmq;
mod overlay;
pub mod plan;
mod prefill;
mod w8a8;
mod weights;

pub use context::{ForwardContext, MAX_GEMV_TOKENS};
pub use footprint::Footprint;
pub use lora::{LoraFfnWeights, LoraProjection, ShrinkPlan, MAX_LORA_RANK};
pub use mmq::{kernels as mmq_kernels, MmqCopies, MmqWeight, PrefillConfig, MMQ_ENV};
pub use nvfp4_mmq::{
    kernels as nvfp4_mmq_kernels, relayout_tiled, Nvfp4MmqCopies, Nvfp4MmqWeight, NVFP4_MMQ_ENV,
    NVFP4_MMQ_K_UNIT,
};
pub use overlay::{
    DenseWeight, Fp8Weight, Overlay, OverlayKind, PackedQ2Weight, Q4kWeight, TiledWeight,
};
pub use prefill::{PrefillArm, PREFILL_LOG_TARGET};
pub use w8a8::{a16_kernels as w8a16_kernels, kernels as w8a8_kernels, W8A8_ENV};
pub use weights::{DenseFfnWeights, Nvfp4Weight};

use crate::backend::{DevicePtr, GpuBackend, Launch};
use crate::error::{Error, Result};
use denseffn_device::formats::nvfp4::TILE_K;
use denseffn_device::params::{
    source, ActPackParams, ElementwiseParams, GemvParams, ParamBlock, GEMV_THREADS,
    GEMV_WAIT_INPUT, PACK_SMEM_BYTES, PACK_THREADS,
};
use lora::LoraSlot;

/// What the kernel launched just before a GEMV on the stream is to that GEMV, which decides
/// whether it can start early (programmatic dependent launch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    /// A `lora_shrink` when LoRA is installed (the GEMV waits for `ax` only in its epilogue),
    /// else whatever preceded the call: an ordinary launch.
    MaybeShrink,
    /// The kernel that writes this GEMV's activations: the GEMV issues its first weight loads,
    /// then waits for it (`GEMV_WAIT_INPUT`).
    Producer,
}
use plan::{GemvPlan, Staging};
use std::sync::Arc;

/// Alignment in bytes every forward path requires of its input pointer: the prefill kernels read
/// activations as 16-byte vectors, and a misaligned vector load would be a device fault (which
/// spoils the CUDA context), so a misaligned input is refused before any launch.
pub const INPUT_ALIGN: u64 = 16;

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
    /// `gelu_tanh(g)·u`, packed for `forward_km`'s down GEMV (`source::PACKED`).
    pub const GELU_MUL_PACK: &str = "gelu_mul_pack";
    /// `silu(g)·u`, packed for `forward_km`'s down GEMV.
    pub const SILU_MUL_PACK: &str = "silu_mul_pack";
    /// Dual GEMV (gate+up) for 2 tokens.
    pub const BATCH2_GATE_UP: &str = "gemv_batch2_nvfp4_gate_up";
    /// Dual GEMV (gate+up) for 3 tokens.
    pub const BATCH3_GATE_UP: &str = "gemv_batch3_nvfp4_gate_up";
    /// Down GEMV for 2 tokens.
    pub const BATCH2_DOWN: &str = "gemv_batch2_nvfp4_down";
    /// Down GEMV for 3 tokens.
    pub const BATCH3_DOWN: &str = "gemv_batch3_nvfp4_down";
    /// One projection, m ≤ 4 tokens.
    pub const BATCHM: &str = "gemv_batchm_nvfp4";
    /// One projection, 5 ≤ m ≤ 8 tokens.
    pub const BATCH8: &str = "gemv_batch8_nvfp4";
    /// LoRA shrink `ax = (alpha/rank)·A·x` of gate+up or of down (with LoRA installed, once
    /// before gate+up and once before down on every path).
    pub const LORA_SHRINK: &str = "lora_shrink";
    /// The prefill GEMMs of a LoRA layer (`nvfp4_t_m128` arm): gate+up and down with the
    /// `B·ax` expansion in their epilogues (separate entry points, so the plain ones keep their
    /// registers and occupancy).
    pub const LORA_GEMMS: [&str; 2] = ["gemm_nvfp4_t_lora_gate_up_act", "gemm_nvfp4_t_lora_down"];
}

/// The decode / verify / km kernels of one weight set (NVFP4 or an overlay format).
#[derive(Debug, PartialEq, Eq)]
pub struct KernelSet {
    /// Dual gate+up GEMV (1 token).
    pub gate_up: &'static str,
    /// Down GEMV with silu(g)·u computed while staging.
    pub silu_down: &'static str,
    /// Down GEMV over an activated f32 input.
    pub down: &'static str,
    /// Dual gate+up GEMV for 2 / 3 tokens.
    pub batch_gate_up: [&'static str; 2],
    /// Down GEMV for 2 / 3 tokens.
    pub batch_down: [&'static str; 2],
    /// One projection, m ≤ 4 tokens.
    pub batchm: &'static str,
    /// One projection, 5 ≤ m ≤ 8 tokens.
    pub batch8: &'static str,
}

impl KernelSet {
    /// The NVFP4 decode kernels (`kernels::*`).
    pub const NVFP4: KernelSet = KernelSet {
        gate_up: kernels::GATE_UP,
        silu_down: kernels::SILU_DOWN,
        down: kernels::DOWN,
        batch_gate_up: [kernels::BATCH2_GATE_UP, kernels::BATCH3_GATE_UP],
        batch_down: [kernels::BATCH2_DOWN, kernels::BATCH3_DOWN],
        batchm: kernels::BATCHM,
        batch8: kernels::BATCH8,
    };

    /// An overlay format's kernels: one dual and one single-projection GEMV serve every m ≤ 8
    /// and every activation source, so the same names fill several roles.
    const fn overlay(dual: &'static str, single: &'static str) -> KernelSet {
        KernelSet {
            gate_up: dual,
            silu_down: single,
            down: single,
            batch_gate_up: [dual, dual],
            batch_down: [single, single],
            batchm: single,
            batch8: single,
        }
    }

    /// The Q2_0 overlay's kernels.
    pub const Q2: KernelSet = KernelSet::overlay("q2_0_gemv_gate_up", "q2_0_gemv");
    /// The native Q4_K weights' kernels.
    pub const Q4K: KernelSet = KernelSet::overlay("q4k_gemv_gate_up", "q4k_gemv");
    /// The FP8 overlay's kernels (W8A16: FP8 weights, bf16 activations).
    pub const FP8: KernelSet = KernelSet::overlay("w8a16_gemv_gate_up", "w8a16_gemv");
    /// The BF16 overlay's decode kernels.
    pub const BF16: KernelSet = KernelSet::overlay("bf16_gemv_gate_up", "bf16_gemv");

    /// The kernels of a weight set.
    pub fn of(overlay: Option<OverlayKind>) -> &'static KernelSet {
        match overlay {
            None => &KernelSet::NVFP4,
            Some(OverlayKind::Q2) => &KernelSet::Q2,
            Some(OverlayKind::Q4k) => &KernelSet::Q4K,
            Some(OverlayKind::Fp8) => &KernelSet::FP8,
            Some(OverlayKind::Bf16) => &KernelSet::BF16,
        }
    }
}

/// One projection as the kernels see it: tiled codes and scales, the per-tensor factor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Proj {
    pub codes: u64,
    pub scales: u64,
    pub global: f32,
    pub rows: usize,
    pub cols: usize,
}

impl From<&Nvfp4Weight> for Proj {
    fn from(w: &Nvfp4Weight) -> Proj {
        Proj {
            codes: w.codes.ptr().0,
            scales: w.scales.ptr().0,
            global: w.global,
            rows: w.rows,
            cols: w.cols,
        }
    }
}

impl From<&TiledWeight> for Proj {
    fn from(w: &TiledWeight) -> Proj {
        Proj {
            codes: w.codes.ptr().0,
            scales: w.scales.as_ref().map_or(0, |s| s.ptr().0),
            global: w.global,
            rows: w.rows,
            cols: w.cols,
        }
    }
}

/// The weights and kernels a decode-family call runs.
struct Route {
    set: &'static KernelSet,
    gate: Proj,
    up: Proj,
    down: Proj,
}

/// A dense FFN layer on one device.
///
/// Inputs and outputs are bf16 `[tokens][hidden]` device buffers; accumulation is f32.
///
/// Threads: `Send + Sync`. A layer may be shared by threads (e.g. behind an `Arc`) and its
/// forward paths called from them at once: a call only reads the weights, and all per-call
/// state lives in the [`ForwardContext`] it takes by `&mut`. Concurrent calls on distinct
/// contexts give exactly the results of the same calls made one after another (checked in
/// `tests/contracts.rs`).
pub struct DenseFfnLayer {
    weights: DenseFfnWeights,
    activation: FfnActivation,
    gpu: Arc<dyn GpuBackend>,
    overlays: overlay::Overlays,
    lora: Option<lora::LoraDevice>,
    prefill_config: PrefillConfig,
    /// At most this many blocks in a persistent prefill GEMM's grid (`None`: one per SM).
    gemm_grid_cap: Option<std::num::NonZeroU32>,
    /// The NVFP4 layer's Q4_K MMQ copies (from `finalize_q4k_load`).
    mmq: Option<MmqCopies>,
    /// The NVFP4 layer's W4A4 copies of gate and up (from `finalize_nvfp4_mmq_load`).
    nvfp4_mmq: Option<Nvfp4MmqCopies>,
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
            overlays: Default::default(),
            lora: None,
            prefill_config: PrefillConfig::from_env(),
            gemm_grid_cap: None,
            mmq: None,
            nvfp4_mmq: None,
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

    /// The kernel set of decode, verify and km: the active overlay's, else NVFP4's.
    fn kernel_set(&self) -> &'static KernelSet {
        KernelSet::of(self.active_overlay())
    }

    /// The weights and kernels of decode, verify and km: the active overlay's, else NVFP4's
    /// (an error for placeholder NVFP4 weights).
    fn route(&self) -> Result<Route> {
        match self.overlays.active() {
            Some(o) => Ok(Route {
                set: KernelSet::of(Some(o.kind)),
                gate: (&o.gate).into(),
                up: (&o.up).into(),
                down: (&o.down).into(),
            }),
            None if self.weights.placeholder => Err(Error::Unsupported(
                "the layer holds placeholder NVFP4 weights and no overlay: install one (set_bf16_weights, set_fp8_weights, set_q2_weights, set_q4k_weights)".into(),
            )),
            None => Ok(Route {
                set: &KernelSet::NVFP4,
                gate: (&self.weights.gate).into(),
                up: (&self.weights.up).into(),
                down: (&self.weights.down).into(),
            }),
        }
    }

    /// Whether the small-batch paths (k2, k3, km) go through [`DenseFfnLayer::forward_prefill`]
    /// (a BF16 overlay on top), whose `bf16_gemv_m8` arm reads the weights once for all rows.
    fn small_batch_via_prefill(&self) -> bool {
        self.active_overlay() == Some(OverlayKind::Bf16)
    }

    /// Kernels `forward` launches, in order: SiLU 2 (gate_up, silu_down), GELU 3 (gate_up,
    /// gelu_mul, down), of the active weight set; with LoRA, a `lora_shrink` before gate_up and
    /// one before the down GEMV: SiLU 4, GELU 5.
    pub fn decode_kernels(&self) -> Vec<&'static str> {
        let k = self.kernel_set();
        match self.activation {
            FfnActivation::Silu => self.with_lora(&[k.gate_up], &[k.silu_down]),
            FfnActivation::Gelu => self.with_lora(&[k.gate_up, kernels::GELU_MUL], &[k.down]),
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
        self.require(&self.decode_kernels())?;
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
        self.check_call("forward_batched", input, num_tokens, ctx)?;
        self.require(&self.decode_kernels())?;
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

    /// Kernels [`DenseFfnLayer::forward_k2`] / `forward_k3` launch (`k` = 2 or 3), in order:
    /// 3 (dual batch GEMV, activation·up, batch down; with LoRA 5: a `lora_shrink` before
    /// each GEMV), or the prefill arm's for a BF16 layer.
    pub fn verify_kernels(&self, k: usize) -> Vec<&'static str> {
        if self.small_batch_via_prefill() {
            return self.prefill_kernels(k);
        }
        let set = self.kernel_set();
        let i = usize::from(k != 2);
        self.with_lora(
            &[set.batch_gate_up[i], self.act_pack_kernel()],
            &[set.batch_down[i]],
        )
    }

    /// Kernels [`DenseFfnLayer::forward_km`] launches for `m` tokens, in order (4 launches:
    /// gate, up, the activation packer, down; the batch8 kernel for m = 5..=8; with LoRA 6: a
    /// `lora_shrink` before gate and before down), or the prefill arm's for a BF16 layer.
    pub fn km_kernels(&self, m: usize) -> Vec<&'static str> {
        if self.small_batch_via_prefill() {
            return self.prefill_kernels(m);
        }
        let set = self.kernel_set();
        let g = if m > 4 { set.batch8 } else { set.batchm };
        self.with_lora(&[g, g, self.act_pack_kernel()], &[g])
    }

    fn act_pack_kernel(&self) -> &'static str {
        match self.activation {
            FfnActivation::Silu => kernels::SILU_MUL_PACK,
            FfnActivation::Gelu => kernels::GELU_MUL_PACK,
        }
    }

    /// Two draft tokens (bf16 `[2][hidden]`): dual batch2 GEMV + activation·up + batch2 down =
    /// 3 launches, each weight byte read once for both tokens.
    pub fn forward_k2(
        &self,
        input: DevicePtr,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        self.forward_verify(input, 2, ctx, stream)
    }

    /// Three draft tokens: as [`DenseFfnLayer::forward_k2`] with the batch3 kernels.
    pub fn forward_k3(
        &self,
        input: DevicePtr,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        self.forward_verify(input, 3, ctx, stream)
    }

    fn forward_verify(
        &self,
        input: DevicePtr,
        k: usize,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        self.check_ctx(ctx)?;
        self.check_input(input, k)?;
        if self.small_batch_via_prefill() {
            return self.forward_prefill(input, k, ctx, stream);
        }
        self.require(&self.verify_kernels(k))?;
        let r = self.route()?;
        let i = usize::from(k != 2);
        self.lora_shrink_gate_up(input, k, ctx, stream)?;
        let mut gu = self.gate_up_params(&r, input, k, ctx);
        self.lora_gemv(&mut gu, LoraSlot::Gate, k, ctx);
        self.launch_gemv(r.set.batch_gate_up[i], &mut gu, stream, After::MaybeShrink)?;
        self.launch_act_down(&r, r.set.batch_down[i], k, ctx, stream)?;
        Ok(ctx.out.ptr())
    }

    /// Whether [`DenseFfnLayer::forward_km`] can run `m` tokens: exactly when 1 ≤ m ≤ 8, its
    /// kernels are in the loaded module, and the weights it reads are loaded (the NVFP4 decode
    /// weights, which a layer always holds, or the active overlay; for a BF16 layer, its prefill
    /// arm).
    pub fn can_forward_km(&self, m: usize) -> bool {
        let names = self.km_kernels(m);
        (1..=MAX_GEMV_TOKENS).contains(&m)
            && (self.small_batch_via_prefill() || self.route().is_ok())
            && !names.is_empty()
            && names.iter().all(|k| self.gpu.has_kernel(k))
    }

    /// `m` ≤ 8 tokens (bf16 `[m][hidden]`): batched gate + batched up + activation·up + batched
    /// down = 4 launches, each projection's weights read once for all m rows. Any m outside
    /// 1..=8, or a layer where [`DenseFfnLayer::can_forward_km`] is false, is an error (never a
    /// silent fallback).
    pub fn forward_km(
        &self,
        input: DevicePtr,
        m: usize,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        if !(1..=MAX_GEMV_TOKENS).contains(&m) {
            return Err(Error::Invalid(format!(
                "forward_km: m = {m}, must be 1..={MAX_GEMV_TOKENS}"
            )));
        }
        self.check_ctx(ctx)?;
        self.check_input(input, m)?;
        if self.small_batch_via_prefill() {
            return self.forward_prefill(input, m, ctx, stream);
        }
        self.require(&self.km_kernels(m))?;
        let r = self.route()?;
        let g = if m > 4 { r.set.batch8 } else { r.set.batchm };
        let (pack, scales) = (ctx.pack.ptr().0, ctx.pack_scales.ptr().0);
        self.lora_shrink_gate_up(input, m, ctx, stream)?;
        // Gate stages the input and leaves the staged copy for up, which reads it with the
        // same K splits (same shape, same plan) instead of staging again.
        let mut gate = self.gemv_params(&r.gate, input, ctx.g.ptr(), m, ctx);
        (gate.pack_out, gate.pack_scales) = (pack, scales);
        self.lora_gemv(&mut gate, LoraSlot::Gate, m, ctx);
        let plan = self.gemv_plan(g, &gate);
        self.launch_planned(g, &plan, &mut gate, stream, After::MaybeShrink)?;
        let mut up = self.gemv_params(&r.up, DevicePtr(pack), ctx.u.ptr(), m, ctx);
        (up.source, up.act1) = (source::PACKED, scales);
        self.lora_gemv(&mut up, LoraSlot::Up, m, ctx);
        self.launch_planned(g, &plan, &mut up, stream, After::Producer)?;
        self.launch_act_down(&r, g, m, ctx, stream)?;
        Ok(ctx.out.ptr())
    }

    /// The verify paths' second half over f32 g and u: the packer writes act(g)·u in the form
    /// the down GEMV `kernel` reads (`source::PACKED`, for down's own K splits, which only the
    /// wave model bounds), then LoRA's shrink of down when installed, then down (bf16 out).
    fn launch_act_down(
        &self,
        r: &Route,
        kernel: &'static str,
        m: usize,
        ctx: &ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let (pack, scales) = (ctx.pack.ptr(), ctx.pack_scales.ptr().0);
        let mut down = self.gemv_params(&r.down, pack, ctx.out.ptr(), m, ctx);
        (down.source, down.act1, down.out_bf16) = (source::PACKED, scales, 1);
        let plan = self.gemv_plan(kernel, &down);
        self.launch_act_pack(m, plan.chunks_per_split, ctx, stream)?;
        let a = ctx.a.ptr();
        self.lora_shrink_down((source::F32, a, DevicePtr::NULL), m, ctx, stream)?;
        self.lora_gemv(&mut down, LoraSlot::Down, m, ctx);
        self.launch_planned(kernel, &plan, &mut down, stream, self.after_act())
    }

    /// `act(g)·u` over `m` tokens as a packed buffer for a down GEMV with `chunks_per_split`
    /// chunks per K split (and as f32 `a` when LoRA's shrink of down reads it).
    fn launch_act_pack(
        &self,
        m: usize,
        chunks_per_split: u32,
        ctx: &ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let k = self.intermediate() as u32;
        let p = ActPackParams {
            g: ctx.g.ptr().0,
            u: ctx.u.ptr().0,
            out: if self.lora.is_some() {
                ctx.a.ptr().0
            } else {
                0
            },
            packed: ctx.pack.ptr().0,
            scales: ctx.pack_scales.ptr().0,
            k,
            m: m as u32,
            chunks_per_split,
            _pad: 0,
        };
        let splits = (k / TILE_K as u32).div_ceil(chunks_per_split);
        let l = Launch {
            kernel: self.act_pack_kernel(),
            grid: (splits, m as u32, 1),
            block: (PACK_THREADS, 1, 1),
            smem: PACK_SMEM_BYTES,
            params: p.as_bytes(),
        };
        // After the GEMV that writes g and u: it waits for that first.
        self.gpu.launch_dependent(&l, stream)
    }

    /// Parameters of one projection `w` over `m` tokens of bf16 `input`, f32 out.
    fn gemv_params(
        &self,
        w: &Proj,
        input: DevicePtr,
        out: DevicePtr,
        m: usize,
        ctx: &ForwardContext,
    ) -> GemvParams {
        GemvParams {
            w0: w.codes,
            s0: w.scales,
            act0: input.0,
            out0: out.0,
            ws: ctx.ws.ptr().0,
            counters: ctx.counters.ptr().0,
            gscale0: w.global,
            n: w.rows as u32,
            k: w.cols as u32,
            m: m as u32,
            source: source::BF16,
            ..Default::default()
        }
    }

    /// Parameters of the dual gate+up GEMV: g and u (f32) into the context.
    fn gate_up_params(
        &self,
        r: &Route,
        input: DevicePtr,
        m: usize,
        ctx: &ForwardContext,
    ) -> GemvParams {
        GemvParams {
            w1: r.up.codes,
            s1: r.up.scales,
            gscale1: r.up.global,
            out1: ctx.u.ptr().0,
            ..self.gemv_params(&r.gate, input, ctx.g.ptr(), m, ctx)
        }
    }

    /// Plans and launches one GEMV that follows `after` on the stream.
    fn launch_gemv(
        &self,
        kernel: &'static str,
        p: &mut GemvParams,
        stream: u64,
        after: After,
    ) -> Result<()> {
        let plan = self.gemv_plan(kernel, p);
        self.launch_planned(kernel, &plan, p, stream, after)
    }

    /// What precedes a down GEMV: LoRA's shrink of down when installed, else the kernel that
    /// wrote its input.
    fn after_act(&self) -> After {
        if self.lora.is_some() {
            After::MaybeShrink
        } else {
            After::Producer
        }
    }

    /// The K splits of GEMV `kernel` over `p`'s shape and source: planned for the kernel's
    /// register-limited occupancy, then again if the plan's shared memory lowers it.
    fn gemv_plan(&self, kernel: &'static str, p: &GemvParams) -> GemvPlan {
        let (n, k, m, sms) = (
            p.n as usize,
            p.k as usize,
            p.m as usize,
            self.gpu.sm_count(),
        );
        let staging = Staging::of_source(p.source);
        let resident = self.gpu.resident_blocks(kernel, GEMV_THREADS, 0);
        let mut plan = GemvPlan::new(n, k, m, sms, resident, staging);
        let with_smem = self.gpu.resident_blocks(
            kernel,
            GEMV_THREADS,
            staging.smem_bytes(p.m, plan.chunks_per_split),
        );
        if with_smem < resident {
            plan = GemvPlan::new(n, k, m, sms, with_smem, staging);
        }
        plan
    }

    /// Launches GEMV `kernel` over `p` with `plan`, as the programmatic dependent
    /// ([`GpuBackend::launch_dependent`]) of what precedes it where that is safe (`after`).
    fn launch_planned(
        &self,
        kernel: &'static str,
        plan: &GemvPlan,
        p: &mut GemvParams,
        stream: u64,
        after: After,
    ) -> Result<()> {
        let dependent = match after {
            After::MaybeShrink => p.lora_rank != 0,
            After::Producer => {
                p.flags |= GEMV_WAIT_INPUT;
                true
            }
        };
        let launch = plan.launch(kernel, p);
        if dependent {
            self.gpu.launch_dependent(&launch, stream)
        } else {
            self.gpu.launch(&launch, stream)
        }
    }

    /// `a = gelu_tanh(g)·u` over `m` tokens (`forward` of a GELU layer; SiLU is fused into
    /// its down GEMV).
    fn launch_gelu_mul(&self, m: usize, ctx: &ForwardContext, stream: u64) -> Result<()> {
        let len = (m * self.intermediate()) as u32;
        let ew = ElementwiseParams {
            g: ctx.g.ptr().0,
            u: ctx.u.ptr().0,
            out: ctx.a.ptr().0,
            len,
            _pad: 0,
        };
        let l = Launch {
            kernel: kernels::GELU_MUL,
            grid: (len.div_ceil(1024), 1, 1),
            block: (256, 1, 1),
            smem: 0,
            params: ew.as_bytes(),
        };
        // After the gate+up GEMV that writes g and u: it waits for that first.
        self.gpu.launch_dependent(&l, stream)
    }

    /// Launches the decode kernels for `m` ≤ 8 tokens, writing bf16 `[m][hidden]` to `out`.
    pub(crate) fn decode_into(
        &self,
        input: DevicePtr,
        out: DevicePtr,
        m: usize,
        ctx: &ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let r = self.route()?;
        self.lora_shrink_gate_up(input, m, ctx, stream)?;
        let mut gu = self.gate_up_params(&r, input, m, ctx);
        self.lora_gemv(&mut gu, LoraSlot::Gate, m, ctx);
        self.launch_gemv(r.set.gate_up, &mut gu, stream, After::MaybeShrink)?;
        let mut down = self.gemv_params(&r.down, ctx.g.ptr(), out, m, ctx);
        down.out_bf16 = 1;
        let kernel = match self.activation {
            FfnActivation::Silu => {
                down.act1 = ctx.u.ptr().0;
                down.source = source::SILU_F32;
                r.set.silu_down
            }
            FfnActivation::Gelu => {
                self.launch_gelu_mul(m, ctx, stream)?;
                down.act0 = ctx.a.ptr().0;
                down.source = source::F32;
                r.set.down
            }
        };
        let src = (down.source, DevicePtr(down.act0), DevicePtr(down.act1));
        self.lora_shrink_down(src, m, ctx, stream)?;
        self.lora_gemv(&mut down, LoraSlot::Down, m, ctx);
        self.launch_gemv(kernel, &mut down, stream, self.after_act())
    }

    /// Every kernel in `names` is in the loaded module, else an error naming the first missing.
    fn require(&self, names: &[&'static str]) -> Result<()> {
        match names.iter().find(|n| !self.gpu.has_kernel(n)) {
            Some(n) => Err(Error::MissingKernel((*n).into())),
            None => Ok(()),
        }
    }

    fn check_ctx(&self, ctx: &ForwardContext) -> Result<()> {
        // A context of another backend (another GPU of a tensor-parallel group, say) holds
        // addresses this device cannot write: refuse it before any launch.
        if !Arc::ptr_eq(ctx.out.backend(), &self.gpu) {
            return Err(Error::Invalid(format!(
                "ForwardContext was made on another backend instance ({}) than the layer's ({}): make the context from this layer",
                ctx.out.backend().name(),
                self.gpu.name()
            )));
        }
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

    /// The checks of a multi-token call: the context fits the layer and holds `tokens` (≥ 1),
    /// and the input buffer holds `tokens` rows.
    fn check_call(
        &self,
        what: &str,
        input: DevicePtr,
        tokens: usize,
        ctx: &ForwardContext,
    ) -> Result<()> {
        self.check_ctx(ctx)?;
        if tokens == 0 || tokens > ctx.max_tokens {
            return Err(Error::Invalid(format!(
                "{what}: {tokens} tokens, the context holds 1..={}",
                ctx.max_tokens
            )));
        }
        self.check_input(input, tokens)
    }

    /// The input holds `tokens` bf16 rows from `input` to the end of its allocation, and is
    /// [`INPUT_ALIGN`]-byte aligned.
    fn check_input(&self, input: DevicePtr, tokens: usize) -> Result<()> {
        if input.0 % INPUT_ALIGN != 0 {
            return Err(Error::Invalid(format!(
                "input {:#x} is not {INPUT_ALIGN}-byte aligned: the kernels read activations in {INPUT_ALIGN}-byte vectors (device allocations are 256-byte aligned, and whole-token offsets keep that)",
                input.0
            )));
        }
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
