//! The Q4_K MMQ prefill arm (`q4k_mmq`): its configuration, its device copies, how an NVFP4
//! layer gets them at load ([`DenseFfnLayer::finalize_q4k_load`]) and how it runs.
//!
//! Launches per `forward_prefill` call: 4 — `quantize_q8_32` (the input, per 32 values to int8
//! with an f32 scale and sum), `q4k_mmq_gate_up_act` (gate and up on integer tensor cores, the
//! activation fused, bf16 `act(g)·u` out), `quantize_q8_32` (that intermediate), `q4k_mmq`
//! (down, bf16 out).
//!
//! Weights: the MMQ layout of `denseffn_device::formats::q4k_mmq` (ggml's 4.5 bits a value).
//! Native Q4_K weights (`set_q4k_weights`) get their copies at install when the arm is enabled,
//! re-laid losslessly from the ggml blocks; an NVFP4 layer gets them from
//! [`DenseFfnLayer::finalize_q4k_load`], which requantizes NVFP4 → Q4_K on the device
//! (`requant_nvfp4_q4k`, one launch per matrix) and then frees the `_t` copies.
use super::DenseFfnLayer;
use crate::backend::{DevicePtr, GpuBackend, Launch};
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::pack_q4k::Q4kHost;
use denseffn_device::formats::q4k_mmq::{self, SUB, TILE_K, TILE_ROWS};
use denseffn_device::params::{
    mmq_rows_per_block, MmqParams, ParamBlock, Q8Params, RequantParams, MMQ_SMEM_BYTES,
    MMQ_TOKENS_PER_BLOCK, Q8_THREADS, REQUANT_SMEM_BYTES,
};
use std::sync::Arc;

/// The environment variable that enables the `q4k_mmq` arm when set to `1` (read by
/// [`PrefillConfig::from_env`], the default of every new layer).
pub const MMQ_ENV: &str = "DENSEFFN_FFN_MMQ";

/// The MMQ arm's kernel entry points.
pub mod kernels {
    /// Activations bf16 → int8 per 32 with f32 `(d, s)`.
    pub const QUANTIZE: &str = "quantize_q8_32";
    /// Gate+up on integer tensor cores, activation fused, bf16 out.
    pub const GATE_UP: &str = "q4k_mmq_gate_up_act";
    /// One projection (down), bf16 out.
    pub const DOWN: &str = "q4k_mmq";
    /// NVFP4 (tiled) → Q4_K (MMQ layout), at load.
    pub const REQUANT: &str = "requant_nvfp4_q4k";
}

/// Prefill options of a layer. Set with [`DenseFfnLayer::set_prefill_config`]; a new layer starts
/// from [`PrefillConfig::from_env`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefillConfig {
    /// Enable the Q4_K MMQ arm (`q4k_mmq`): it runs when this is set AND the layer holds Q4_K
    /// MMQ copies (native Q4_K weights installed while it was set, or an NVFP4 layer after
    /// [`DenseFfnLayer::finalize_q4k_load`]). Also makes [`super::ForwardContext::new`]
    /// allocate the arm's int8 scratch.
    pub q4k_mmq: bool,
    /// Enable the NVFP4 W4A4 MMQ arm (`nvfp4_mmq`): it runs when this is set AND the layer
    /// holds W4A4 copies of gate and up ([`DenseFfnLayer::finalize_nvfp4_mmq_load`]) and down's
    /// `_t` copy. Also makes [`super::ForwardContext::new`] allocate the arm's scratch.
    pub nvfp4_mmq: bool,
    /// Enable the FP8 × FP8 arm (`w8a8_gemm`) of a layer with an FP8 overlay: activations
    /// quantized per token to E4M3 on the FP8 tensor cores instead of the W8A16 GEMM
    /// (`super::w8a8`). Also makes [`super::ForwardContext::new`] allocate its scratch.
    pub w8a8: bool,
}

impl PrefillConfig {
    /// `q4k_mmq` from `DENSEFFN_FFN_MMQ`, `nvfp4_mmq` from `DENSEFFN_FFN_NVFP4_MMQ`, `w8a8`
    /// from `DENSEFFN_FFN_W8A8` (`1` enables it; anything else, or unset, does not).
    pub fn from_env() -> Self {
        let on = |var: &str| std::env::var(var).is_ok_and(|v| v.trim() == "1");
        PrefillConfig {
            q4k_mmq: on(MMQ_ENV),
            nvfp4_mmq: on(super::NVFP4_MMQ_ENV),
            w8a8: on(super::W8A8_ENV),
        }
    }
}

/// One matrix `[rows, cols]` in the MMQ layout on the device.
#[derive(Debug)]
pub struct MmqWeight {
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// Fragment-ordered 4-bit codes (2048 bytes per 16×256 tile).
    pub codes: DeviceBuffer,
    /// ggml block headers (`d`, `dmin`, packed scales; 256 bytes per tile).
    pub heads: DeviceBuffer,
}

impl MmqWeight {
    /// Bytes on the device (rows · cols · 144 / 256).
    pub fn bytes(&self) -> usize {
        self.codes.len() + self.heads.len()
    }

    fn alloc(gpu: &Arc<dyn GpuBackend>, rows: usize, cols: usize) -> Result<Self> {
        let (cb, hb) = q4k_mmq::bytes(rows, cols);
        Ok(MmqWeight {
            rows,
            cols,
            codes: DeviceBuffer::alloc(gpu, cb)?,
            heads: DeviceBuffer::alloc(gpu, hb)?,
        })
    }

    fn upload(gpu: &Arc<dyn GpuBackend>, tensor: &str, w: &Q4kHost) -> Result<Self> {
        let (codes, heads) = w.to_mmq(tensor)?;
        Ok(MmqWeight {
            rows: w.rows,
            cols: w.cols,
            codes: DeviceBuffer::from_bytes(gpu, &codes)?,
            heads: DeviceBuffer::from_bytes(gpu, &heads)?,
        })
    }
}

/// Gate, up and down in the MMQ layout.
#[derive(Debug)]
pub struct MmqCopies {
    /// Gate `[intermediate, hidden]`.
    pub gate: MmqWeight,
    /// Up `[intermediate, hidden]`.
    pub up: MmqWeight,
    /// Down `[hidden, intermediate]`.
    pub down: MmqWeight,
}

impl MmqCopies {
    /// Bytes on the device.
    pub fn bytes(&self) -> usize {
        self.gate.bytes() + self.up.bytes() + self.down.bytes()
    }

    /// Uploads native Q4_K weights re-laid for the arm.
    pub(crate) fn from_q4k(
        gpu: &Arc<dyn GpuBackend>,
        gate: &Q4kHost,
        up: &Q4kHost,
        down: &Q4kHost,
    ) -> Result<Self> {
        Ok(MmqCopies {
            gate: MmqWeight::upload(gpu, "gate", gate)?,
            up: MmqWeight::upload(gpu, "up", up)?,
            down: MmqWeight::upload(gpu, "down", down)?,
        })
    }
}

/// The arm's per-context scratch: int8 codes and f32 `(d, s)` of `max_tokens × max(h, i)`
/// values (the input, then the intermediate).
pub(crate) struct MmqScratch {
    pub q: DeviceBuffer,
    pub d: DeviceBuffer,
    /// Values per token it holds.
    pub width: usize,
}

impl MmqScratch {
    pub fn new(gpu: &Arc<dyn GpuBackend>, max_tokens: usize, width: usize) -> Result<Self> {
        let blocks = max_tokens * width.div_ceil(SUB);
        Ok(MmqScratch {
            q: DeviceBuffer::alloc(gpu, blocks * SUB)?,
            d: DeviceBuffer::alloc(gpu, blocks * 8)?,
            width,
        })
    }

    pub fn bytes(&self) -> usize {
        self.q.len() + self.d.len()
    }
}

/// Rows a multiple of 16 and columns of 256 (Q4_K super-blocks), for both shapes of the layer.
fn check_mmq_shape(h: usize, i: usize) -> Result<()> {
    if h % TILE_K != 0 || i % TILE_K != 0 || h % TILE_ROWS != 0 {
        return Err(Error::Shape(format!(
            "the q4k_mmq arm needs hidden and intermediate multiples of {TILE_K} (Q4_K super-blocks), the layer is {h} × {i}"
        )));
    }
    Ok(())
}

impl DenseFfnLayer {
    /// The prefill options in force.
    pub fn prefill_config(&self) -> PrefillConfig {
        self.prefill_config
    }

    /// Sets the prefill options. Enabling `q4k_mmq` builds nothing by itself: native Q4_K
    /// weights get their MMQ copies when installed while it is set, NVFP4 layers from
    /// [`DenseFfnLayer::finalize_q4k_load`]. Contexts made before enabling it lack the arm's
    /// scratch (a prefill through the arm then says so).
    pub fn set_prefill_config(&mut self, config: PrefillConfig) {
        self.prefill_config = config;
    }

    /// Whether the layer holds Q4_K MMQ copies (its own, from finalize, or the active Q4_K
    /// weights').
    pub fn has_q4k_mmq_copies(&self) -> bool {
        self.mmq_copies().is_some()
    }

    /// The Q4_K MMQ copies the `q4k_mmq` arm reads now, if any (for inspection and tests:
    /// `Q4kHost::from_mmq` turns a matrix back into ggml blocks).
    pub fn q4k_mmq_copies(&self) -> Option<&MmqCopies> {
        self.mmq_copies()
    }

    /// The MMQ copies the arm would read: the installed Q4_K weights' when they are the active
    /// weight set, else the NVFP4 layer's own.
    pub(crate) fn mmq_copies(&self) -> Option<&MmqCopies> {
        match self.overlays.active() {
            Some(o) => o.mmq.as_ref(),
            None => self.mmq.as_ref(),
        }
    }

    /// For NVFP4 layers using the Q4_K MMQ prefill arm; call it at load, before sizing a KV
    /// cache from free memory. When the arm is enabled ([`PrefillConfig::q4k_mmq`]) it
    /// (1) materializes the Q4_K copies of gate, up and down on the device — `requant_nvfp4_q4k`
    /// requantizes the NVFP4 weights per 256-value super-block (per-32 scale/min fit, 6-bit
    /// scales, f16 `d`/`dmin`) straight into the MMQ layout, one launch per matrix, then waits
    /// for `stream` — and (2) only then frees the `_t` copies, which the arm does not read. Net
    /// footprint: the copies are exactly the size of the `_t` copies (4.5 bits a value); peak:
    /// baseline + the copies; decode weights untouched.
    ///
    /// A no-op (logged at debug level) when the arm is disabled, when the copies already exist,
    /// or when the active weights are native Q4_K (their copies come at install). Refused
    /// (`Error::Unsupported`) while LoRA deltas are installed, which the arm does not apply. `gpu` must be
    /// the layer's backend and `(h, inter)` its shape. On any failure (out of memory at any
    /// allocation, the kernel missing, a launch error) the layer is exactly as it was.
    pub fn finalize_q4k_load(
        &mut self,
        gpu: &Arc<dyn GpuBackend>,
        h: usize,
        inter: usize,
        stream: u64,
    ) -> Result<()> {
        self.check_finalize_args("finalize_q4k_load", gpu, h, inter)?;
        let noop = |why: &str| {
            tracing::debug!("finalize_q4k_load: nothing to do ({why})");
            Ok(())
        };
        if !self.prefill_config.q4k_mmq {
            return noop(
                "the q4k_mmq arm is not enabled: PrefillConfig::q4k_mmq / DENSEFFN_FFN_MMQ=1",
            );
        }
        if let Some(rank) = self.lora_rank() {
            return Err(Error::Unsupported(format!(
                "finalize_q4k_load: LoRA deltas (rank {rank}) are installed, and the q4k_mmq arm does not apply them (finalizing would also free the `_t` copies the LoRA prefill reads): clear_lora first"
            )));
        }
        if self.mmq.is_some() {
            return noop("the Q4_K MMQ copies already exist");
        }
        if self.active_overlay() == Some(super::OverlayKind::Q4k) {
            return noop("native Q4_K weights: their MMQ copies are made at install");
        }
        if self.weights.placeholder {
            return Err(Error::Unsupported(
                "finalize_q4k_load: the layer holds placeholder NVFP4 weights, nothing to requantize".into(),
            ));
        }
        check_mmq_shape(h, inter)?;
        self.require(&[kernels::REQUANT])?;
        let gpu = self.gpu.clone();
        let w = &self.weights;
        let mut made = Vec::with_capacity(3);
        for src in [&w.gate, &w.up, &w.down] {
            let dst = MmqWeight::alloc(&gpu, src.rows, src.cols)?;
            let p = RequantParams {
                codes: src.codes.ptr().0,
                scales: src.scales.ptr().0,
                dst_codes: dst.codes.ptr().0,
                dst_heads: dst.heads.ptr().0,
                global: src.global,
                rows: src.rows as u32,
                cols: src.cols as u32,
                _pad: 0,
            };
            let blocks = (src.rows * src.cols / SUB).div_ceil(Q8_THREADS as usize) as u32;
            gpu.launch(
                &Launch {
                    kernel: kernels::REQUANT,
                    grid: (blocks, 1, 1),
                    block: (Q8_THREADS, 1, 1),
                    smem: REQUANT_SMEM_BYTES,
                    params: p.as_bytes(),
                },
                stream,
            )?;
            made.push(dst);
        }
        gpu.synchronize(stream)?;
        let [gate, up, down]: [MmqWeight; 3] = made.try_into().expect("three matrices");
        let before = self.weights.t_bytes();
        self.mmq = Some(MmqCopies { gate, up, down });
        self.weights.gate_t = None;
        self.weights.up_t = None;
        self.weights.down_t = None;
        tracing::debug!(
            "finalize_q4k_load: Q4_K MMQ copies made ({} bytes), `_t` copies freed ({before} bytes)",
            self.footprint().mmq_copies
        );
        Ok(())
    }

    /// The checks every finalize path makes first: `gpu` is the layer's backend and `(h, inter)`
    /// its shape.
    pub(super) fn check_finalize_args(
        &self,
        what: &str,
        gpu: &Arc<dyn GpuBackend>,
        h: usize,
        inter: usize,
    ) -> Result<()> {
        if !std::ptr::addr_eq(Arc::as_ptr(gpu), Arc::as_ptr(&self.gpu)) {
            return Err(Error::Invalid(format!(
                "{what}: `gpu` is not the backend this layer was built on"
            )));
        }
        if (h, inter) != (self.hidden(), self.intermediate()) {
            return Err(Error::Shape(format!(
                "{what}: called with hidden {h} / intermediate {inter}, the layer is {} / {}",
                self.hidden(),
                self.intermediate()
            )));
        }
        Ok(())
    }

    /// The `q4k_mmq` arm's 4 launches for `n` tokens of `input` into the context's output.
    pub(crate) fn prefill_mmq(
        &self,
        input: DevicePtr,
        n: usize,
        ctx: &super::ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let m = self.mmq_copies().ok_or_else(|| {
            Error::Unsupported("prefill: the q4k_mmq arm has no Q4_K MMQ copies".into())
        })?;
        let s = ctx.mmq.as_ref().ok_or_else(|| {
            Error::Invalid(
                "forward_prefill: this ForwardContext has no q4k_mmq scratch (it was made before the arm was enabled): make a new one".into(),
            )
        })?;
        let (h, i) = (self.hidden(), self.intermediate());
        if s.width < h.max(i) {
            return Err(Error::Invalid(
                "forward_prefill: this ForwardContext holds only the nvfp4_mmq arm's scratch (made before q4k_mmq was enabled): make a new one".into(),
            ));
        }
        let act = match self.activation() {
            super::FfnActivation::Silu => 1,
            super::FfnActivation::Gelu => 2,
        };
        self.launch_quantize(input, h, n, s, stream)?;
        let gu = MmqParams {
            w1: m.up.codes.ptr().0,
            h1: m.up.heads.ptr().0,
            act,
            ..mmq_params(&m.gate, s, ctx.prefill_act.ptr(), n)
        };
        self.launch_mmq(kernels::GATE_UP, &gu, stream)?;
        self.launch_quantize(ctx.prefill_act.ptr(), i, n, s, stream)?;
        self.launch_mmq(
            kernels::DOWN,
            &mmq_params(&m.down, s, ctx.out.ptr(), n),
            stream,
        )
    }

    /// Launches a per-token activation quantizer (`quantize_nvfp4_act`, `quantize_e4m3_act`,
    /// `quantize_f16_act`): one block of `threads` per token over `x` (bf16 `[n][k]`) into codes
    /// `q` and scales `d`, with a shared-memory slot per warp for the block's maximum;
    /// `dependent`: as the programmatic dependent of the kernel before it (the quantizer waits
    /// for it first).
    pub(crate) fn launch_token_quantize(
        &self,
        kernel: &'static str,
        threads: u32,
        (x, k, n): (DevicePtr, usize, usize),
        (q, d): (DevicePtr, DevicePtr),
        (stream, dependent): (u64, bool),
    ) -> Result<()> {
        let p = Q8Params {
            x: x.0,
            qs: q.0,
            ds: d.0,
            tokens: n as u32,
            k: k as u32,
        };
        let l = Launch {
            kernel,
            grid: (n as u32, 1, 1),
            block: (threads, 1, 1),
            smem: threads / 32 * 4,
            params: p.as_bytes(),
        };
        if dependent {
            self.gpu.launch_dependent(&l, stream)
        } else {
            self.gpu.launch(&l, stream)
        }
    }

    fn launch_quantize(
        &self,
        x: DevicePtr,
        k: usize,
        n: usize,
        s: &MmqScratch,
        stream: u64,
    ) -> Result<()> {
        let p = Q8Params {
            x: x.0,
            qs: s.q.ptr().0,
            ds: s.d.ptr().0,
            tokens: n as u32,
            k: k as u32,
        };
        let blocks = (n * k / SUB).div_ceil(Q8_THREADS as usize) as u32;
        self.gpu.launch(
            &Launch {
                kernel: kernels::QUANTIZE,
                grid: (blocks, 1, 1),
                block: (Q8_THREADS, 1, 1),
                smem: 0,
                params: p.as_bytes(),
            },
            stream,
        )
    }

    fn launch_mmq(&self, kernel: &'static str, p: &MmqParams, stream: u64) -> Result<()> {
        let grid = (
            p.n.div_ceil(mmq_rows_per_block(p.w1 != 0)),
            p.tokens.div_ceil(MMQ_TOKENS_PER_BLOCK),
            1,
        );
        self.gpu.launch(
            &Launch {
                kernel,
                grid,
                block: (256, 1, 1),
                smem: MMQ_SMEM_BYTES,
                params: p.as_bytes(),
            },
            stream,
        )
    }

    /// MMQ copies of native Q4_K weights, when the arm is enabled (else `None`).
    pub(crate) fn q4k_mmq_for_install(
        &self,
        gate: &Q4kHost,
        up: &Q4kHost,
        down: &Q4kHost,
    ) -> Result<Option<MmqCopies>> {
        if !self.prefill_config.q4k_mmq {
            return Ok(None);
        }
        check_mmq_shape(self.hidden(), self.intermediate())?;
        MmqCopies::from_q4k(&self.gpu, gate, up, down).map(Some)
    }
}

fn mmq_params(w: &MmqWeight, s: &MmqScratch, out: DevicePtr, tokens: usize) -> MmqParams {
    MmqParams {
        w0: w.codes.ptr().0,
        h0: w.heads.ptr().0,
        xq: s.q.ptr().0,
        xd: s.d.ptr().0,
        out: out.0,
        n: w.rows as u32,
        k: w.cols as u32,
        tokens: tokens as u32,
        ..Default::default()
    }
}
