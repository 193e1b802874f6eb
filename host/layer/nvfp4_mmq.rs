//! The NVFP4 W4A4 MMQ prefill arm (`nvfp4_mmq`): its device copies, how a layer gets them at
//! load ([`DenseFfnLayer::finalize_nvfp4_mmq_load`]) and how it runs.
//!
//! Launches per `forward_prefill` call: 3 — `quantize_nvfp4_act` (the input, per token to NVFP4:
//! per-token f32 global scale, E4M3 scale per 16, E2M1 codes), `nvfp4_mmq_gate_up_act` (gate
//! and up as NVFP4 × NVFP4 on int8 tensor cores, `mma.m16n8k16` per 16-value group, the
//! activation fused, bf16 `act(g)·u` out) and `gemm_nvfp4_t_down` (down on the default arm's
//! `wgmma` GEMM over down's `_t` copy: a hybrid prefill, down keeps bf16 activations
//! for accuracy).
//!
//! Weights: the W4A4 layout of `denseffn_device::formats::nvfp4_mmq` (ggml's `block_nvfp4`
//! idea, 4.5 bits a value, fragment-ordered), re-laid exactly from the layer's NVFP4 weights.
use super::DenseFfnLayer;
use crate::backend::{DevicePtr, GpuBackend, Launch};
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use denseffn_device::formats::{nvfp4, nvfp4_mmq as fmt};
use denseffn_device::params::{
    GemmParams, ParamBlock, W4a4Params, MMQ_SMEM_BYTES, MMQ_TOKENS_PER_BLOCK, NVFP4_ACT_THREADS,
    W4A4_ROWS_PER_BLOCK,
};
use std::sync::Arc;

/// The environment variable that enables the `nvfp4_mmq` arm when set to `1` (read by
/// [`super::PrefillConfig::from_env`], the default of every new layer).
pub const NVFP4_MMQ_ENV: &str = "DENSEFFN_FFN_NVFP4_MMQ";

/// Columns of `hidden` the arm needs a multiple of (the gate+up kernel stages 256 at a time).
pub const NVFP4_MMQ_K_UNIT: usize = 256;

/// The W4A4 arm's kernel entry points.
pub mod kernels {
    /// Activations bf16 → NVFP4 per token (int8 doubled codes, f32 factor per 16).
    pub const QUANTIZE: &str = "quantize_nvfp4_act";
    /// Gate+up NVFP4 × NVFP4 on int8 tensor cores, activation fused, bf16 out.
    pub const GATE_UP: &str = "nvfp4_mmq_gate_up_act";
    /// Down: the default arm's bf16 GEMM over down's `_t` copy.
    pub const DOWN: &str = "gemm_nvfp4_t_down";
    /// All of them, in launch order.
    pub const ALL: [&str; 3] = [QUANTIZE, GATE_UP, DOWN];
}

/// One matrix `[rows, cols]` in the W4A4 layout on the device.
#[derive(Debug)]
pub struct Nvfp4MmqWeight {
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// Fragment-ordered E2M1 codes (512 bytes per 16×64 tile).
    pub codes: DeviceBuffer,
    /// E4M3 scales (64 bytes per tile).
    pub scales: DeviceBuffer,
    /// The tensor's f32 global scale.
    pub global: f32,
}

impl Nvfp4MmqWeight {
    /// Bytes on the device (rows · cols · 36 / 64).
    pub fn bytes(&self) -> usize {
        self.codes.len() + self.scales.len()
    }

    /// The copy of `w` (a tiled NVFP4 matrix on the device): downloaded, re-laid on the host
    /// ([`relayout_tiled`]) and uploaded. Exact.
    fn from_tiled(gpu: &Arc<dyn GpuBackend>, w: &super::Nvfp4Weight) -> Result<Self> {
        let (codes, scales) =
            relayout_tiled(&w.codes.to_vec()?, &w.scales.to_vec()?, w.rows, w.cols)?;
        let codes = DeviceBuffer::from_bytes(gpu, &codes)?;
        let scales = DeviceBuffer::from_bytes(gpu, &scales)?;
        Ok(Nvfp4MmqWeight {
            rows: w.rows,
            cols: w.cols,
            codes,
            scales,
            global: w.global,
        })
    }

    /// The matrix back in the tiled NVFP4 layout (codes, scales), for inspection and tests.
    pub fn to_tiled(&self) -> Result<(Vec<u8>, Vec<u8>)> {
        let (codes, scales) = (self.codes.to_vec()?, self.scales.to_vec()?);
        let tiles = (self.rows / fmt::TILE_ROWS) * (self.cols / fmt::TILE_K);
        let mut tc = vec![0u8; tiles * nvfp4::TILE_CODE_BYTES];
        for (tile, (src, dst)) in codes
            .chunks_exact(fmt::TILE_CODE_BYTES)
            .zip(tc.chunks_exact_mut(nvfp4::TILE_CODE_BYTES))
            .enumerate()
        {
            debug_assert!(tile < tiles);
            for lr in 0..fmt::TILE_ROWS {
                for lk in 0..fmt::TILE_K {
                    let (off, slot) = nvfp4::tiled_code_pos(lr, lk, 1);
                    let w =
                        u32::from_le_bytes([dst[off], dst[off + 1], dst[off + 2], dst[off + 3]]);
                    let w = nvfp4::put_slot(w, slot, fmt::code(src, lr, lk));
                    dst[off..off + 4].copy_from_slice(&w.to_le_bytes());
                }
            }
        }
        Ok((tc, scales))
    }
}

/// Re-lays a tiled NVFP4 matrix (`formats::nvfp4`, the decode layout: codes, scales) of
/// `rows × cols` into the W4A4 layout (`formats::nvfp4_mmq`), tile by tile. Exact: every code
/// and scale byte is kept. Errors when the buffers do not hold such a matrix.
pub fn relayout_tiled(
    codes: &[u8],
    scales: &[u8],
    rows: usize,
    cols: usize,
) -> Result<(Vec<u8>, Vec<u8>)> {
    if rows == 0 || cols == 0 || rows % fmt::TILE_ROWS != 0 || cols % fmt::TILE_K != 0 {
        return Err(Error::Shape(format!(
            "nvfp4_mmq re-layout: [{rows}, {cols}] (rows a multiple of 16, columns of 64)"
        )));
    }
    let (cb, sb) = fmt::bytes(rows, cols);
    if codes.len() != cb || scales.len() != sb {
        return Err(Error::Shape(format!(
            "nvfp4_mmq re-layout: [{rows}, {cols}] needs {cb} code and {sb} scale bytes, got {} and {}",
            codes.len(),
            scales.len()
        )));
    }
    let mut out_c = vec![0u8; cb];
    let mut out_s = vec![0u8; sb];
    for (((src_c, src_s), dst_c), dst_s) in codes
        .chunks_exact(nvfp4::TILE_CODE_BYTES)
        .zip(scales.chunks_exact(nvfp4::TILE_SCALE_BYTES))
        .zip(out_c.chunks_exact_mut(fmt::TILE_CODE_BYTES))
        .zip(out_s.chunks_exact_mut(fmt::TILE_SCALE_BYTES))
    {
        fmt::relayout_tile(src_c, src_s, dst_c, dst_s);
    }
    Ok((out_c, out_s))
}

/// Gate and up in the W4A4 layout (down stays on its `_t` copy).
#[derive(Debug)]
pub struct Nvfp4MmqCopies {
    /// Gate `[intermediate, hidden]`.
    pub gate: Nvfp4MmqWeight,
    /// Up `[intermediate, hidden]`.
    pub up: Nvfp4MmqWeight,
}

impl Nvfp4MmqCopies {
    /// Bytes on the device.
    pub fn bytes(&self) -> usize {
        self.gate.bytes() + self.up.bytes()
    }
}

impl DenseFfnLayer {
    /// Whether the layer holds W4A4 copies of gate and up (from
    /// [`DenseFfnLayer::finalize_nvfp4_mmq_load`]).
    pub fn has_nvfp4_mmq_copies(&self) -> bool {
        self.nvfp4_mmq.is_some()
    }

    /// The W4A4 copies the `nvfp4_mmq` arm reads, if any (for inspection and tests).
    pub fn nvfp4_mmq_copies(&self) -> Option<&Nvfp4MmqCopies> {
        self.nvfp4_mmq.as_ref()
    }

    /// For NVFP4 layers using the W4A4 MMQ prefill arm ([`super::PrefillConfig::nvfp4_mmq`] or
    /// `DENSEFFN_FFN_NVFP4_MMQ=1`); call it at load, before sizing a KV cache from free memory.
    /// It (1) materializes the W4A4 copies of gate and up — each decode copy is downloaded,
    /// re-laid exactly on the host (`relayout_tiled`: codes moved into `mma` fragment order,
    /// scale bytes and global scale unchanged) and uploaded — and (2) only then frees the gate
    /// and up `_t` copies. Down keeps its `_t` copy (the arm runs down on the bf16 GEMM). Net
    /// footprint: the copies are exactly the size of the freed `_t` copies (4.5 bits a value);
    /// peak: baseline + the copies; decode weights untouched. `stream` is synchronized before
    /// the download (earlier work on the weights is finished).
    ///
    /// A no-op (logged at debug level) when the arm is disabled, when the copies already exist,
    /// or when `finalize_q4k_load` already freed the `_t` copies (its arm takes priority). Errors,
    /// with the layer exactly as it was (nothing allocated stays, nothing freed): a kernel of the
    /// arm missing (`Error::MissingKernel` naming it), out of memory at any allocation,
    /// placeholder weights, a shape the arm cannot run (hidden not a multiple of 256), `gpu` not
    /// the layer's backend or `(h, inter)` not its shape.
    pub fn finalize_nvfp4_mmq_load(
        &mut self,
        gpu: &Arc<dyn GpuBackend>,
        h: usize,
        inter: usize,
        stream: u64,
    ) -> Result<()> {
        self.check_finalize_args("finalize_nvfp4_mmq_load", gpu, h, inter)?;
        let noop = |why: &str| {
            tracing::debug!("finalize_nvfp4_mmq_load: nothing to do ({why})");
            Ok(())
        };
        if !self.prefill_config.nvfp4_mmq {
            return noop(
                "the nvfp4_mmq arm is not enabled: PrefillConfig::nvfp4_mmq / DENSEFFN_FFN_NVFP4_MMQ=1",
            );
        }
        if let Some(rank) = self.lora_rank() {
            return Err(Error::Unsupported(format!(
                "finalize_nvfp4_mmq_load: LoRA deltas (rank {rank}) are installed, and the nvfp4_mmq arm does not apply them (finalizing would also free the gate/up `_t` copies the LoRA prefill reads): clear_lora first"
            )));
        }
        if self.nvfp4_mmq.is_some() {
            return noop("the W4A4 copies already exist");
        }
        if self.weights.placeholder {
            return Err(Error::Unsupported(
                "finalize_nvfp4_mmq_load: the layer holds placeholder NVFP4 weights, nothing to re-lay".into(),
            ));
        }
        let w = &self.weights;
        if w.gate_t.is_none() || w.up_t.is_none() || w.down_t.is_none() {
            return noop(
                "the `_t` copies were already freed (finalize_q4k_load): the q4k_mmq arm runs",
            );
        }
        check_shape(h)?;
        self.require(&kernels::ALL)?;
        self.gpu.synchronize(stream)?;
        let gate = Nvfp4MmqWeight::from_tiled(&self.gpu, &w.gate)?;
        let up = Nvfp4MmqWeight::from_tiled(&self.gpu, &w.up)?;
        let copies = Nvfp4MmqCopies { gate, up };
        let freed = [&w.gate_t, &w.up_t]
            .iter()
            .filter_map(|t| t.as_ref())
            .map(|t| t.bytes())
            .sum::<usize>();
        tracing::debug!(
            "finalize_nvfp4_mmq_load: W4A4 copies of gate/up made ({} bytes), gate/up `_t` copies freed ({freed} bytes)",
            copies.bytes()
        );
        self.nvfp4_mmq = Some(copies);
        self.weights.gate_t = None;
        self.weights.up_t = None;
        Ok(())
    }

    /// Undoes [`DenseFfnLayer::finalize_nvfp4_mmq_load`]: rebuilds the gate and up `_t` copies
    /// (device-to-device copies of the decode copies, the same tiled layout), waits for
    /// `stream`, then drops the W4A4 copies. Net footprint unchanged. A no-op when the layer has
    /// no W4A4 copies; on out of memory the layer is as it was.
    pub fn undo_nvfp4_mmq_load(&mut self, stream: u64) -> Result<()> {
        if self.nvfp4_mmq.is_none() {
            return Ok(());
        }
        let copy = |w: &super::Nvfp4Weight| -> Result<super::Nvfp4Weight> {
            let codes = DeviceBuffer::alloc(&self.gpu, w.codes.len())?;
            let scales = DeviceBuffer::alloc(&self.gpu, w.scales.len())?;
            self.gpu
                .copy_async(codes.ptr(), w.codes.ptr(), w.codes.len(), stream)?;
            self.gpu
                .copy_async(scales.ptr(), w.scales.ptr(), w.scales.len(), stream)?;
            Ok(super::Nvfp4Weight {
                rows: w.rows,
                cols: w.cols,
                codes,
                scales,
                global: w.global,
            })
        };
        let gate_t = copy(&self.weights.gate)?;
        let up_t = copy(&self.weights.up)?;
        self.gpu.synchronize(stream)?;
        self.weights.gate_t = Some(gate_t);
        self.weights.up_t = Some(up_t);
        self.nvfp4_mmq = None;
        Ok(())
    }

    /// The `nvfp4_mmq` arm's 3 launches for `n` tokens of `input` into the context's output.
    pub(crate) fn prefill_nvfp4_mmq(
        &self,
        input: DevicePtr,
        n: usize,
        ctx: &super::ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let m = self.nvfp4_mmq.as_ref().ok_or_else(|| {
            Error::Unsupported("prefill: the nvfp4_mmq arm has no W4A4 copies".into())
        })?;
        let down = self.weights.down_t.as_ref().ok_or_else(|| {
            Error::Unsupported("prefill: the nvfp4_mmq arm needs down's `_t` copy".into())
        })?;
        let s = ctx.mmq.as_ref().ok_or_else(|| {
            Error::Invalid(
                "forward_prefill: this ForwardContext has no nvfp4_mmq scratch (it was made before the arm was enabled): make a new one".into(),
            )
        })?;
        let h = self.hidden();
        self.launch_token_quantize(
            kernels::QUANTIZE,
            NVFP4_ACT_THREADS,
            (input, h, n),
            (s.q.ptr(), s.d.ptr()),
            (stream, false),
        )?;
        let gu = W4a4Params {
            w0: m.gate.codes.ptr().0,
            s0: m.gate.scales.ptr().0,
            w1: m.up.codes.ptr().0,
            s1: m.up.scales.ptr().0,
            xq: s.q.ptr().0,
            xs: s.d.ptr().0,
            out: ctx.prefill_act.ptr().0,
            gscale0: m.gate.global,
            gscale1: m.up.global,
            n: m.gate.rows as u32,
            k: h as u32,
            tokens: n as u32,
            act: match self.activation() {
                super::FfnActivation::Silu => 1,
                super::FfnActivation::Gelu => 2,
            },
        };
        self.gpu.launch(
            &Launch {
                kernel: kernels::GATE_UP,
                grid: (
                    gu.n.div_ceil(W4A4_ROWS_PER_BLOCK),
                    gu.tokens.div_ceil(MMQ_TOKENS_PER_BLOCK),
                    1,
                ),
                block: (256, 1, 1),
                smem: MMQ_SMEM_BYTES,
                params: gu.as_bytes(),
            },
            stream,
        )?;
        let dp = GemmParams {
            w0: down.codes.ptr().0,
            s0: down.scales.ptr().0,
            x: ctx.prefill_act.ptr().0,
            out: ctx.out.ptr().0,
            gscale0: down.global,
            n: down.rows as u32,
            k: down.cols as u32,
            tokens: n as u32,
            ..Default::default()
        };
        self.launch_gemm(kernels::DOWN, &dp, ctx, stream)
    }
}

/// Hidden a multiple of 256 (the gate+up kernel's staging step).
fn check_shape(h: usize) -> Result<()> {
    if h % NVFP4_MMQ_K_UNIT != 0 {
        return Err(Error::Shape(format!(
            "the nvfp4_mmq arm needs hidden a multiple of {NVFP4_MMQ_K_UNIT}, the layer has {h}"
        )));
    }
    Ok(())
}
