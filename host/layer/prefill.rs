//! `forward_prefill`: the prefill dispatcher. One table picks the arm from the layer's state;
//! every call is timed with GPU events and logged as `FFN prefill [<arm>] N=<n>: <us>µs`
//! (target `denseffn::prefill`, level INFO) so per-phase logs can be summed.
//!
//! | priority | arm | runs when | kernels |
//! |---|---|---|---|
//! | 1 | `q2_0_gemm` | a Q2_0 overlay is installed | `q2_0_gemm_gate_up_act`, `q2_0_gemm` |
//! | 2a | `q4k_mmq` | native Q4_K weights are installed, the MMQ arm is enabled and they have MMQ copies | `quantize_q8_32`, `q4k_mmq_gate_up_act`, `quantize_q8_32`, `q4k_mmq` |
//! | 2b | `q4k_gemm` | native Q4_K weights are installed | `q4k_gemm_gate_up_act`, `q4k_gemm` |
//! | 3a | `w8a8_gemm` | an FP8 overlay is installed and the FP8 × FP8 arm is enabled | `quantize_e4m3_act`, `w8a8_gemm_gate_up_act`, `quantize_e4m3_act`, `w8a8_gemm` |
//! | 3b | `w8a16_gemm` | an FP8 overlay is installed | `quantize_f16_act`, `w8a16_gemm_gate_up_act`, `quantize_f16_act`, `w8a16_gemm` |
//! | 4a | `bf16_gemv_m8` | a BF16 overlay is installed and N ≤ 8 | `bf16_gemv_gate_up`, (`gelu_mul`), `bf16_gemv` |
//! | 4b | `bf16_gemm` | a BF16 overlay is installed and N > 8 | `bf16_gemm_gate_up_act`, `bf16_gemm` |
//! | 5a | `q4k_mmq` | no overlay, the MMQ arm is enabled and `finalize_q4k_load` made the Q4_K copies | as 2a |
//! | 5b | `nvfp4_mmq` | no overlay, the W4A4 arm is enabled, `finalize_nvfp4_mmq_load` made the gate/up copies and down's `_t` copy is held | `quantize_nvfp4_act`, `nvfp4_mmq_gate_up_act`, `gemm_nvfp4_t_down` |
//! | 5c | `nvfp4_t_m128` | the NVFP4 `_t` copies are held | `gemm_nvfp4_t_gate_up_act`, `gemm_nvfp4_t_down` (with LoRA: `lora_shrink`, `gemm_nvfp4_t_lora_gate_up_act`, `lora_shrink`, `gemm_nvfp4_t_lora_down`) |
//! | – | (none) | otherwise | `Error::Unsupported` naming what is missing |
//!
//! The MMQ arm (`q4k_mmq`, `super::mmq`) is enabled by `PrefillConfig::q4k_mmq` or
//! `DENSEFFN_FFN_MMQ=1`; it quantizes activations per 32 to int8 and multiplies on integer
//! tensor cores: 4 launches (quantize, gate+up with the activation fused, quantize, down), any N.
//!
//! The FP8 × FP8 arm (`w8a8_gemm`, `super::w8a8`) is enabled by `PrefillConfig::w8a8` or
//! `DENSEFFN_FFN_W8A8=1`: activations quantized per token to E4M3 (power-of-two scale), gate+up
//! and down on the FP8 tensor cores over the FP8 overlay's tiles: 4 launches, any N (the GEMMs
//! the BF16 arm's persistent kernel with FP8 stages, in the same `_x2` cluster-pair forms; the
//! second quantizer and both GEMMs programmatic dependents of the launch before them).
//!
//! The W4A4 arm (`nvfp4_mmq`, `super::nvfp4_mmq`) is enabled by `PrefillConfig::nvfp4_mmq` or
//! `DENSEFFN_FFN_NVFP4_MMQ=1`: activations quantized per token to NVFP4, gate+up NVFP4 × NVFP4
//! on int8 tensor cores, down on the bf16 GEMM over its `_t` copy: 3 launches, any N. It sits
//! below `q4k_mmq` (5a): `finalize_q4k_load` frees down's `_t` copy, which the hybrid arm needs,
//! so a layer finalized for Q4_K MMQ can only run that arm; and above `nvfp4_t_m128`, whose
//! gate/up `_t` copies `finalize_nvfp4_mmq_load` frees.
//!
//! Every GEMM arm but `w8a8_gemm` and `bf16_gemm` (the persistent `device/src/kernels/bulk_gemm.rs`)
//! is the same `wgmma` GEMM (`device/src/kernels/wgemm.rs`) over a different
//! tiled format; gate and up run in one pass with the activation fused, then down: 2 launches.
//! A BF16 layer's small batches (its k2/k3/km paths come here) run the BF16 decode GEMV for all
//! N ≤ 8 rows at once instead (2 launches, 3 with GELU): each weight byte is still read once.
use super::lora::LoraSlot;
use super::plan::{gemm_splits, gemm_tail_split};
use super::{DenseFfnLayer, FfnActivation, ForwardContext, OverlayKind, Proj};
use crate::backend::{DevicePtr, Launch, TileMapSpec};
use crate::error::{Error, Result};
use denseffn_device::formats::nvfp4::TILE_K;
use denseffn_device::params::{
    gemm_grid, gemm_shape, source, GemmParams, ParamBlock, GEMM_WG_TOKENS,
};

/// The log target of the prefill timers.
pub const PREFILL_LOG_TARGET: &str = "denseffn::prefill";

/// A prefill arm: one way of running the whole prefill FFN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefillArm {
    /// `wgmma` (bf16) GEMM over the NVFP4 `_t` copies, dequantized per 16 columns in
    /// registers; gate and up in one pass with the activation fused; 2 launches.
    Nvfp4TM128,
    /// The same GEMM over the Q2_0 overlay's 2-bit tiles.
    Q2Gemm,
    /// The same GEMM over the native Q4_K weights' 4-bit tiles.
    Q4kGemm,
    /// FP8 weights × bf16 activations (W8A16) on the persistent GEMM of the FP8 × FP8 arm:
    /// activations converted per token to f16 (a power-of-two scale), `wgmma` f16 products over
    /// the FP8 overlay's tiles; quantize, gate+up with the activation fused, quantize, down;
    /// 4 launches.
    Fp8Gemm,
    /// FP8 × FP8 over the FP8 overlay's tiles: activations quantized per token to E4M3,
    /// `wgmma` e4m3 products; quantize, gate+up with the activation fused, quantize, down;
    /// 4 launches.
    W8a8Gemm,
    /// The same GEMM over the BF16 overlay's bf16 tiles (both operands by descriptor).
    Bf16Gemm,
    /// Int8 activations × Q4_K MMQ copies on integer tensor cores (`mma.m16n8k32` s8): quantize,
    /// gate+up with the activation fused, quantize, down; 4 launches.
    Q4kMmq,
    /// N ≤ 8 on a BF16 layer: the BF16 tensor-core GEMV over all N rows at once.
    Bf16GemvM8,
    /// NVFP4 W4A4: activations quantized per token to NVFP4, gate+up on int8 tensor cores
    /// (`mma.m16n8k16` s8 per 16-value group) with the activation fused, down on the bf16 GEMM
    /// over its `_t` copy; 3 launches.
    Nvfp4Mmq,
}

impl PrefillArm {
    /// The name in logs and tables.
    pub fn name(self) -> &'static str {
        match self {
            PrefillArm::Nvfp4TM128 => "nvfp4_t_m128",
            PrefillArm::Q2Gemm => "q2_0_gemm",
            PrefillArm::Q4kGemm => "q4k_gemm",
            PrefillArm::Fp8Gemm => "w8a16_gemm",
            PrefillArm::W8a8Gemm => "w8a8_gemm",
            PrefillArm::Bf16Gemm => "bf16_gemm",
            PrefillArm::Bf16GemvM8 => "bf16_gemv_m8",
            PrefillArm::Q4kMmq => "q4k_mmq",
            PrefillArm::Nvfp4Mmq => "nvfp4_mmq",
        }
    }

    /// The kernels the arm launches, in order (for [`PrefillArm::Bf16GemvM8`], with SiLU; a
    /// GELU layer adds `gelu_mul` between them: [`DenseFfnLayer::prefill_kernels`]).
    pub fn kernels(self) -> &'static [&'static str] {
        match self {
            PrefillArm::Nvfp4TM128 => &["gemm_nvfp4_t_gate_up_act", "gemm_nvfp4_t_down"],
            PrefillArm::Q2Gemm => &["q2_0_gemm_gate_up_act", "q2_0_gemm"],
            PrefillArm::Q4kGemm => &["q4k_gemm_gate_up_act", "q4k_gemm"],
            PrefillArm::Fp8Gemm => &super::w8a16_kernels::ALL,
            PrefillArm::Bf16Gemm => &["bf16_gemm_gate_up_act", "bf16_gemm"],
            PrefillArm::Bf16GemvM8 => &["bf16_gemv_gate_up", "bf16_gemv"],
            PrefillArm::Q4kMmq => &[
                super::mmq_kernels::QUANTIZE,
                super::mmq_kernels::GATE_UP,
                super::mmq_kernels::QUANTIZE,
                super::mmq_kernels::DOWN,
            ],
            PrefillArm::Nvfp4Mmq => &super::nvfp4_mmq_kernels::ALL,
            PrefillArm::W8a8Gemm => &super::w8a8_kernels::ALL,
        }
    }
}

impl DenseFfnLayer {
    /// The arm [`DenseFfnLayer::forward_prefill`] would run now (the dispatch table above).
    /// The arm for `num_tokens` tokens: [`DenseFfnLayer::prefill_arm`], except that a BF16
    /// layer runs N ≤ 8 on its GEMV ([`PrefillArm::Bf16GemvM8`]).
    pub fn prefill_arm_for(&self, num_tokens: usize) -> Result<PrefillArm> {
        match self.prefill_arm()? {
            PrefillArm::Bf16Gemm if num_tokens <= super::MAX_GEMV_TOKENS => {
                Ok(PrefillArm::Bf16GemvM8)
            }
            arm => Ok(arm),
        }
    }

    /// The kernels `forward_prefill` launches for `num_tokens` tokens, in order (empty when no
    /// arm fits), on a context made after the layer's overlay was installed (a BF16 layer's
    /// gate+up `_splitk` needs that context's workspace; an older one runs the plain kernel).
    /// With LoRA (NVFP4 arm only): a `lora_shrink` before each GEMM, 4 launches.
    pub fn prefill_kernels(&self, num_tokens: usize) -> Vec<&'static str> {
        match self.prefill_arm_for(num_tokens) {
            Ok(PrefillArm::Bf16GemvM8) => self.decode_kernels(),
            Ok(arm) => {
                let (h, i) = (self.hidden(), self.intermediate());
                let kernels = self.arm_kernels(arm);
                let gate_up = kernels[0];
                let pair = |k| self.gemm_pair_slots(k, num_tokens as u32);
                // The tail split is BF16's only, whose layers never carry LoRA.
                let tail = gemm_shape(gate_up, true).and_then(|shape| {
                    let tiles = (i as u32).div_ceil(shape.rows)
                        * (num_tokens as u32).div_ceil(shape.tokens);
                    self.gate_up_tail_plan(gate_up, tiles, h, pair(gate_up))
                });
                let whole = pair(gate_up).and_then(|_| pair_variant(gate_up));
                let k0 = tail.map_or(whole.unwrap_or(gate_up), |(name, ..)| name);
                let k: Vec<&'static str> = std::iter::once(k0)
                    .chain(
                        kernels[1..]
                            .iter()
                            .map(|&k| self.gemm_launch_plan(k, num_tokens, h, i, pair(k)).0),
                    )
                    .collect();
                self.with_lora(&k[..1], &k[1..])
            }
            Err(_) => Vec::new(),
        }
    }

    /// The arm [`DenseFfnLayer::forward_prefill`] would run now for more than 8 tokens (the
    /// dispatch table above).
    pub fn prefill_arm(&self) -> Result<PrefillArm> {
        let mmq = self.prefill_config().q4k_mmq && self.has_q4k_mmq_copies();
        match self.active_overlay() {
            Some(OverlayKind::Q2) => return Ok(PrefillArm::Q2Gemm),
            Some(OverlayKind::Q4k) if mmq => return Ok(PrefillArm::Q4kMmq),
            Some(OverlayKind::Q4k) => return Ok(PrefillArm::Q4kGemm),
            Some(OverlayKind::Fp8) if self.prefill_config().w8a8 => {
                return Ok(PrefillArm::W8a8Gemm)
            }
            Some(OverlayKind::Fp8) => return Ok(PrefillArm::Fp8Gemm),
            Some(OverlayKind::Bf16) => return Ok(PrefillArm::Bf16Gemm),
            None => {}
        }
        if mmq {
            return Ok(PrefillArm::Q4kMmq);
        }
        let w = self.weights();
        if self.prefill_config().nvfp4_mmq && self.has_nvfp4_mmq_copies() && w.down_t.is_some() {
            return Ok(PrefillArm::Nvfp4Mmq);
        }
        if w.gate_t.is_some() && w.up_t.is_some() && w.down_t.is_some() {
            return Ok(PrefillArm::Nvfp4TM128);
        }
        if self.has_nvfp4_mmq_copies() && w.down_t.is_some() {
            return Err(Error::Unsupported("prefill: the gate/up `_t` copies were freed by finalize_nvfp4_mmq_load and the nvfp4_mmq arm that replaces them is disabled (PrefillConfig::nvfp4_mmq)".into()));
        }
        if self.has_q4k_mmq_copies() {
            return Err(Error::Unsupported("prefill: the NVFP4 `_t` copies were freed by finalize_q4k_load and the q4k_mmq arm that replaces them is disabled (PrefillConfig::q4k_mmq)".into()));
        }
        Err(Error::Unsupported("prefill: no arm fits this layer (the NVFP4 `_t` copies were freed and no other prefill weights are installed)".into()))
    }

    /// `num_tokens` tokens (bf16 `[num_tokens][hidden]`, 1 ≤ n ≤ the context's `max_tokens`)
    /// through the arm the dispatch table picks; bf16 `[num_tokens][hidden]` out. Logs one
    /// `FFN prefill [<arm>] N=<n>: <us>µs` line per call when INFO is enabled for
    /// [`PREFILL_LOG_TARGET`] (the GPU-event timing waits for the call to finish).
    pub fn forward_prefill(
        &self,
        input: DevicePtr,
        num_tokens: usize,
        ctx: &mut ForwardContext,
        stream: u64,
    ) -> Result<DevicePtr> {
        self.check_call("forward_prefill", input, num_tokens, ctx)?;
        self.check_lora_ctx(ctx, num_tokens)?;
        let arm = self.prefill_arm_for(num_tokens)?;
        self.require(&self.prefill_kernels(num_tokens))?;
        let timed = tracing::enabled!(target: PREFILL_LOG_TARGET, tracing::Level::INFO);
        let start = if timed {
            Some(self.gpu().record_event(stream)?)
        } else {
            None
        };
        if arm == PrefillArm::Bf16GemvM8 {
            self.decode_into(input, ctx.out.ptr(), num_tokens, ctx, stream)?;
        } else if arm == PrefillArm::Q4kMmq {
            self.prefill_mmq(input, num_tokens, ctx, stream)?;
        } else if arm == PrefillArm::Nvfp4Mmq {
            self.prefill_nvfp4_mmq(input, num_tokens, ctx, stream)?;
        } else if arm == PrefillArm::W8a8Gemm || arm == PrefillArm::Fp8Gemm {
            self.prefill_fp8(arm == PrefillArm::Fp8Gemm, input, num_tokens, ctx, stream)?;
        } else {
            let (gate, up, down) = self.prefill_weights(arm)?;
            self.prefill_gemm(arm, [gate, up, down], input, num_tokens, ctx, stream)?;
        }
        if let Some(start) = start {
            let end = self.gpu().record_event(stream)?;
            let us = self.gpu().elapsed_ms(start, end)? as f64 * 1e3;
            tracing::info!(target: PREFILL_LOG_TARGET, "FFN prefill [{}] N={}: {:.1}µs", arm.name(), num_tokens, us);
        }
        Ok(ctx.out.ptr())
    }

    /// The weights `arm` reads.
    pub(super) fn prefill_weights(&self, arm: PrefillArm) -> Result<(Proj, Proj, Proj)> {
        let overlay = |kind: OverlayKind| {
            self.overlays
                .active()
                .filter(|o| o.kind == kind)
                .map(|o| ((&o.gate).into(), (&o.up).into(), (&o.down).into()))
                .ok_or_else(|| Error::Unsupported(format!("prefill: no {} overlay", kind.name())))
        };
        match arm {
            PrefillArm::Q2Gemm => overlay(OverlayKind::Q2),
            PrefillArm::Q4kGemm => overlay(OverlayKind::Q4k),
            PrefillArm::Fp8Gemm | PrefillArm::W8a8Gemm => overlay(OverlayKind::Fp8),
            PrefillArm::Bf16Gemm | PrefillArm::Bf16GemvM8 => overlay(OverlayKind::Bf16),
            PrefillArm::Q4kMmq | PrefillArm::Nvfp4Mmq => Err(Error::Unsupported(format!(
                "prefill: the {} arm reads MMQ copies, not tiles",
                arm.name()
            ))),
            PrefillArm::Nvfp4TM128 => {
                let w = self.weights();
                match (&w.gate_t, &w.up_t, &w.down_t) {
                    (Some(g), Some(u), Some(d)) => Ok((g.into(), u.into(), d.into())),
                    _ => Err(Error::Unsupported("prefill: `_t` copies missing".into())),
                }
            }
        }
    }

    /// Gate+up with the activation fused, then down: the arm's 2 launches.
    fn prefill_gemm(
        &self,
        arm: PrefillArm,
        [gate, up, down]: [Proj; 3],
        input: DevicePtr,
        n: usize,
        ctx: &ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let act = match self.activation() {
            FfnActivation::Silu => 1,
            FfnActivation::Gelu => 2,
        };
        let kernels = self.arm_kernels(arm);
        let mut gu = GemmParams {
            w1: up.codes,
            s1: up.scales,
            gscale1: up.global,
            act,
            ..gemm_params(&gate, input, ctx.prefill_act.ptr(), n)
        };
        self.lora_shrink_gate_up(input, n, ctx, stream)?;
        self.lora_gemm(&mut gu, LoraSlot::Gate, n, ctx);
        self.launch_gemm(kernels[0], &gu, ctx, stream)?;
        let a = ctx.prefill_act.ptr();
        self.lora_shrink_down((source::BF16, a, DevicePtr::NULL), n, ctx, stream)?;
        let mut dp = gemm_params(&down, a, ctx.out.ptr(), n);
        self.lora_gemm(&mut dp, LoraSlot::Down, n, ctx);
        self.launch_gemm(kernels[1], &dp, ctx, stream)
    }

    /// The kernels of `arm` without the shrinks: a LoRA layer's NVFP4 arm runs the `_lora` GEMMs.
    fn arm_kernels(&self, arm: PrefillArm) -> &'static [&'static str] {
        match arm {
            PrefillArm::Nvfp4TM128 if self.lora_rank().is_some() => &super::kernels::LORA_GEMMS,
            arm => arm.kernels(),
        }
    }

    /// Launches one GEMM; with LoRA as the programmatic dependent of the `lora_shrink` right
    /// before it (the GEMM waits for `ax` in its epilogue). A single-projection launch without
    /// LoRA whose grid fills less than half the machine runs as its `_splitk` variant with K
    /// split ([`DenseFfnLayer::gemm_launch_plan`]) over `ctx`'s workspace: one launch still,
    /// the last block of each tile summing the partials.
    pub(super) fn launch_gemm(
        &self,
        kernel: &'static str,
        p: &GemmParams,
        ctx: &ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let dual = p.w1 != 0;
        // A `_splitk` variant has its plain kernel's shape (same family).
        let shape = gemm_shape(kernel, dual)
            .ok_or_else(|| Error::Invalid(format!("{kernel} is not a prefill GEMM")))?;
        let (gx, gy) = (p.n.div_ceil(shape.rows), p.tokens.div_ceil(shape.tokens));
        let mut p = *p;
        let mut kernel = kernel;
        // A persistent (BF16 or FP8-weight) GEMM over an even number of token blocks runs in
        // cluster pairs (`_x2`).
        let pair = self.gemm_pair_slots(kernel, p.tokens);
        let base = kernel;
        if let Some(x2) = pair.and_then(|_| pair_variant(kernel)) {
            kernel = x2;
        }
        let c = if pair.is_some() { 2 } else { 1 };
        if !dual && p.lora_rank == 0 {
            let (name, splits, cps) =
                self.gemm_launch_plan(base, p.tokens as usize, p.n as usize, p.k as usize, pair);
            if splits > 1 && ctx.gemm_split_fits(splits, p.tokens, p.n, gx * gy) {
                kernel = name;
                p.splits = splits;
                p.chunks_per_split = cps;
                p.ws = ctx.gemm_ws.ptr().0;
                p.counters = ctx.gemm_counters.ptr().0;
            }
        } else if p.lora_rank == 0 {
            let plan = self.gate_up_tail_plan(base, gx * gy, p.k as usize, pair);
            if let Some((name, from, splits, cps)) = plan {
                // `from` counts units (pairs of tiles with `c` = 2); every block's split tile has
                // its own partials and counter.
                let split_tiles = gx * gy - c * from;
                let elems = split_tiles * splits * 2 * shape.rows * shape.tokens;
                if ctx.gemm_ws_fits(elems as usize, split_tiles) {
                    kernel = name;
                    p.splits = splits;
                    p.chunks_per_split = cps;
                    p.split_from = from;
                    p.ws = ctx.gemm_ws.ptr().0;
                    p.counters = ctx.gemm_counters.ptr().0;
                }
            }
        }
        if shape.x_map {
            // The FP8 × FP8 GEMMs' E4M3 codes are mapped as 2-byte elements: a box of 64 of
            // them is the stage's 128 columns (the others' bf16 or f16: 64 columns).
            let w8a8 = kernel.starts_with("w8a8");
            p.xmap = self.gpu().encode_tile_map(&TileMapSpec {
                base: DevicePtr(p.x),
                rows: p.tokens,
                cols: if w8a8 { p.k / 2 } else { p.k },
                box_rows: shape.tokens,
                box_cols: TILE_K as u32,
            })?;
        }
        let (shape, slots) = match pair {
            Some(slots) => {
                let pairs = slots.min(self.gemm_grid_blocks() / 2).max(1);
                (gemm_shape(kernel, dual).unwrap_or(shape), 2 * pairs)
            }
            None => (shape, self.gemm_grid_blocks()),
        };
        let launch = Launch {
            kernel,
            grid: gemm_grid(&shape, dual, &p, slots),
            block: (shape.threads, 1, 1),
            smem: shape.smem,
            params: p.as_bytes(),
        };
        if p.lora_rank != 0 || shape.dependent {
            self.gpu().launch_dependent(&launch, stream)
        } else {
            self.gpu().launch(&launch, stream)
        }
    }

    /// Caps the grid of the persistent prefill GEMMs (the BF16 arm's, `bf16_gemm*`) at `blocks`
    /// blocks (`None`, the default: one per SM). Each block runs its share of the launch's
    /// tiles in turn, so the result is the same bits for any cap; a cap leaves SMs to work on
    /// other streams (and lets a test run many tiles through one block). The split-K plans
    /// still assume the whole GPU. The cluster-pair forms (`_x2`) run whole pairs: the cap
    /// rounded down to an even count, at least one pair.
    pub fn set_gemm_grid_cap(&mut self, blocks: Option<std::num::NonZeroU32>) {
        self.gemm_grid_cap = blocks;
    }

    /// Blocks of a persistent GEMM's grid at most: the SM count, or the cap below it.
    fn gemm_grid_blocks(&self) -> u32 {
        let sms = self.gpu().sm_count();
        self.gemm_grid_cap.map_or(sms, |c| c.get().min(sms))
    }

    /// The tail split of gate+up GEMM `kernel` over `tiles` tiles ([`gemm_tail_split`]):
    /// `(entry point, split_from, splits, chunks per split)` when the module has its `_splitk`
    /// variant (BF16 only) and the last wave is partial; `DENSEFFN_GEMM_TAIL_SPLIT=0` turns it
    /// off (read once per process; a switch for measuring what it gains).
    fn gate_up_tail_plan(
        &self,
        kernel: &str,
        tiles: u32,
        k: usize,
        pair: Option<u32>,
    ) -> Option<(&'static str, u32, u32, u32)> {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let on = *ON
            .get_or_init(|| std::env::var("DENSEFFN_GEMM_TAIL_SPLIT").map_or(true, |v| v != "0"));
        let splitk = match (kernel, pair) {
            ("bf16_gemm_gate_up_act", None) => "bf16_gemm_gate_up_act_splitk",
            ("bf16_gemm_gate_up_act", Some(_)) => "bf16_gemm_gate_up_act_splitk_x2",
            _ => return None,
        };
        if !on || !self.gpu().has_kernel(splitk) {
            return None;
        }
        // In cluster pairs: units of two tiles, as many at once as clusters fit.
        let (units, slots) = match pair {
            Some(slots) => (tiles / 2, slots),
            None => (tiles, self.gpu().sm_count()),
        };
        let (from, splits, cps) = gemm_tail_split(units, k, slots)?;
        Some((splitk, from, splits, cps))
    }

    /// Clusters of two blocks that run at once for the `_x2` (cluster-pair) form of persistent GEMM
    /// `kernel` over `tokens` tokens, when that form runs: an even number of 128-token blocks,
    /// the module has it and `DENSEFFN_GEMM_PAIR` is not `0` (read once per process; a switch
    /// for measuring what the pairs gain). The plan (splits) follows from this, not from the
    /// grid cap, so a capped grid gives the same bits; a cap of 1 still launches one pair.
    fn gemm_pair_slots(&self, kernel: &str, tokens: u32) -> Option<u32> {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let on = *ON.get_or_init(|| std::env::var("DENSEFFN_GEMM_PAIR").map_or(true, |v| v != "0"));
        let x2 = pair_variant(kernel)?;
        let blocks = tokens.div_ceil(GEMM_WG_TOKENS);
        if !on || blocks < 2 || blocks % 2 != 0 || !self.gpu().has_kernel(x2) {
            return None;
        }
        let shape = gemm_shape(x2, kernel.contains("gate_up"))?;
        let slots = self
            .gpu()
            .max_active_clusters(x2, shape.threads, shape.smem, 2);
        (slots > 0).then_some(slots)
    }

    /// How single-projection GEMM `kernel` runs `tokens` tokens of an `n × k` matrix:
    /// `(entry point, splits, chunks per split)`. Its `_splitk` variant ([`splitk_variant`])
    /// when the module has it and [`gemm_splits`] gives at least the variant's fewest splits;
    /// else `kernel` over all of K. Other kernels are returned as they are.
    pub(super) fn gemm_launch_plan(
        &self,
        kernel: &'static str,
        tokens: usize,
        n: usize,
        k: usize,
        pair: Option<u32>,
    ) -> (&'static str, u32, u32) {
        let named = match pair {
            Some(_) => pair_variant(kernel).unwrap_or(kernel),
            None => kernel,
        };
        let whole = (named, 1, (k / TILE_K) as u32);
        let Some((splitk, fewest)) = splitk_variant(kernel) else {
            return whole;
        };
        let splitk = match pair {
            Some(_) => pair_variant(splitk).unwrap_or(splitk),
            None => splitk,
        };
        if !self.gpu().has_kernel(splitk) {
            return whole;
        }
        let Some(shape) = gemm_shape(splitk, false) else {
            return whole;
        };
        let tiles = (n as u32).div_ceil(shape.rows) * (tokens as u32).div_ceil(shape.tokens);
        let (splits, cps) = match pair {
            // Units of two tiles, one cluster each.
            Some(slots) => gemm_splits(tiles / 2, k, slots, 1),
            None => {
                let resident = self
                    .gpu()
                    .resident_blocks(splitk, shape.threads, shape.smem);
                gemm_splits(tiles, k, self.gpu().sm_count(), resident)
            }
        };
        if splits >= fewest {
            (splitk, splits, cps)
        } else {
            whole
        }
    }
}

/// The cluster-pair (`_x2`) form of a persistent (BF16 or FP8 × FP8) GEMM entry point
/// ([`denseffn_device::params::GemmShape::cluster`]).
fn pair_variant(kernel: &str) -> Option<&'static str> {
    match kernel {
        "bf16_gemm_gate_up_act" => Some("bf16_gemm_gate_up_act_x2"),
        "bf16_gemm_gate_up_act_splitk" => Some("bf16_gemm_gate_up_act_splitk_x2"),
        "bf16_gemm" => Some("bf16_gemm_x2"),
        "bf16_gemm_splitk" => Some("bf16_gemm_splitk_x2"),
        "w8a8_gemm_gate_up_act" => Some("w8a8_gemm_gate_up_act_x2"),
        "w8a8_gemm" => Some("w8a8_gemm_x2"),
        "w8a16_gemm_gate_up_act" => Some("w8a16_gemm_gate_up_act_x2"),
        "w8a16_gemm" => Some("w8a16_gemm_x2"),
        _ => None,
    }
}

/// The K-split entry point of a single-projection prefill GEMM, and the fewest splits it is
/// used with. Measured on the H200 (docs/perf/2026-12-03-gemm-splitk.md): NVFP4 down gained
/// from 2 splits (8B, N = 512: −6.6%), Q2_0 lost 2.6% there and gained from 8 (N = 128), so
/// the overlay formats split only 4 ways or more; BF16's down blocks are 256 rows
/// (`GEMM_BULK_WIDE_ROWS`), so its grid is half as large and splits from 2 (8B, N = 512: 64 tiles).
fn splitk_variant(kernel: &str) -> Option<(&'static str, u32)> {
    match kernel {
        "gemm_nvfp4_t_down" => Some(("gemm_nvfp4_t_down_splitk", 2)),
        "q2_0_gemm" => Some(("q2_0_gemm_splitk", 4)),
        "q4k_gemm" => Some(("q4k_gemm_splitk", 4)),
        "bf16_gemm" => Some(("bf16_gemm_splitk", 2)),
        _ => None,
    }
}

fn gemm_params(w: &Proj, x: DevicePtr, out: DevicePtr, tokens: usize) -> GemmParams {
    GemmParams {
        w0: w.codes,
        s0: w.scales,
        x: x.0,
        out: out.0,
        gscale0: w.global,
        n: w.rows as u32,
        k: w.cols as u32,
        tokens: tokens as u32,
        ..Default::default()
    }
}
