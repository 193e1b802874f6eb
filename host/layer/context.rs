//! Per-caller scratch and output buffers.
use super::plan::{gemm_split_ws_elems, GemvPlan, Staging, GEMM_MAX_RESIDENT, MAX_RESIDENT_BLOCKS};
use super::DenseFfnLayer;
use crate::backend::DevicePtr;
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use denseffn_device::formats::nvfp4::TILE_K;
use denseffn_device::params::{pack_bytes, pack_scale_bytes};

/// Most tokens one GEMV launch carries (the B operand's 8 columns).
pub const MAX_GEMV_TOKENS: usize = 8;

/// Scratch and output buffers for one caller of a layer. Two contexts may run the same layer at
/// once on two streams; one context must not be used by two streams at once (`&mut` enforces it).
///
/// Threads: `Send + Sync`, so a context may be made on one thread and moved to another. It
/// serves one call at a time: every forward path takes `&mut ForwardContext`, so the compiler
/// rejects two concurrent calls on one context; give each thread (or stream) its own. Checked
/// in `tests/contracts.rs`.
///
/// Buffers: `g`, `u`, `a` f32 `[8][intermediate]`; `out` bf16 `[max_tokens][hidden]`; the
/// prefill activation bf16 `[max_tokens][intermediate]`; split-K
/// workspace; split-K counters (zero between launches: each launch's last block resets them);
/// the prefill down GEMM's split-K workspace (f32, at most one wave of 256 × 64 tiles or
/// 8 splits × `max_tokens` × hidden, whichever is smaller; for a layer with a BF16 overlay
/// at creation also the gate+up GEMM's split last wave, at most `sm_count` tiles' gate and up:
/// `plan::gemm_split_ws_elems`) and its counters (one per tile of a split grid, at most
/// `2 × sm_count`);
/// `forward_km`'s packed activations (`source::PACKED`: f16 `[8][max(hidden, intermediate)]`
/// and an f32 scale per token slot and K split; the gate GEMV leaves the staged input there for
/// up, then the packer the activation for down, in stream order); LoRA scratch
/// (`lora_shrink`'s results f32 `[3][tokens][rank]` for up to 8 tokens at any
/// rank — and for `max_tokens` at the layer's LoRA rank when it has one at creation — its
/// split-K partials, 128 KiB, and counters); and
/// when the layer has the `q4k_mmq` arm enabled, its int8 scratch: `max_tokens · max(h, i)` code
/// bytes and 8 bytes of `(d, s)` per 32 values; when only the `nvfp4_mmq` arm is enabled, its
/// NVFP4 activation scratch in the same buffers: `max_tokens · hidden` int8 doubled E2M1 codes
/// and an f32 factor per 16 values; when the `w8a8_gemm` arm is enabled, the `q4k_mmq` sizes
/// (its E4M3 codes and per-token scales fit them); an f32 scale per token for the `w8a16_gemm`
/// arm (whose f16 activations live in `out` and the prefill activation). Everything is
/// allocated here: no call allocates.
pub struct ForwardContext {
    pub(crate) max_tokens: usize,
    pub(crate) hidden: usize,
    pub(crate) intermediate: usize,
    pub(crate) g: DeviceBuffer,
    pub(crate) u: DeviceBuffer,
    pub(crate) a: DeviceBuffer,
    pub(crate) out: DeviceBuffer,
    pub(crate) prefill_act: DeviceBuffer,
    pub(crate) ws: DeviceBuffer,
    pub(crate) counters: DeviceBuffer,
    pub(crate) gemm_ws: DeviceBuffer,
    pub(crate) gemm_counters: DeviceBuffer,
    pub(crate) pack: DeviceBuffer,
    pub(crate) pack_scales: DeviceBuffer,
    pub(crate) lora: super::lora::LoraScratch,
    /// f32 `[max_tokens]`: the `w8a16_gemm` arm's per-token activation scales.
    pub(crate) act_scales: DeviceBuffer,
    /// The `q4k_mmq` / `nvfp4_mmq` arms' activation scratch (when the layer enabled an arm
    /// before this was made; the two arms never run at once, so they share it).
    pub(crate) mmq: Option<super::mmq::MmqScratch>,
}

impl ForwardContext {
    /// Scratch for `layer` and up to `max_tokens` tokens per call (≥ 1).
    pub fn new(layer: &DenseFfnLayer, max_tokens: usize) -> Result<Self> {
        if max_tokens == 0 {
            return Err(Error::Invalid(
                "ForwardContext: max_tokens must be at least 1".into(),
            ));
        }
        let gpu = layer.gpu();
        let (h, i) = (layer.hidden(), layer.intermediate());
        let sms = gpu.sm_count();
        let mut ws = 1usize;
        let mut groups = 1usize;
        for m in 1..=MAX_GEMV_TOKENS {
            for (n, k) in [(i, h), (h, i)] {
                // The plan depends on the kernel's occupancy: size for every possible one.
                for resident in 1..=MAX_RESIDENT_BLOCKS {
                    for staging in [Staging::Split, Staging::Packed] {
                        let p = GemvPlan::new(n, k, m, sms, resident, staging);
                        ws = ws.max(p.workspace_elems(n, m));
                        groups = groups.max(p.row_groups as usize);
                    }
                }
            }
        }
        let act = MAX_GEMV_TOKENS * i * 4;
        // A BF16 layer's gate+up GEMM splits K of its last wave's tiles (`gemm_tail_split`).
        let bf16 = layer.active_overlay() == Some(super::OverlayKind::Bf16);
        // A packed buffer's splits never exceed its chunks.
        let widest = h.max(i) as u32;
        let pack = pack_bytes(MAX_GEMV_TOKENS as u32, widest) as usize;
        let pack_scales = pack_scale_bytes(widest.div_ceil(TILE_K as u32)) as usize;
        Ok(ForwardContext {
            max_tokens,
            hidden: h,
            intermediate: i,
            g: DeviceBuffer::alloc(gpu, act)?,
            u: DeviceBuffer::alloc(gpu, act)?,
            a: DeviceBuffer::alloc(gpu, act)?,
            out: DeviceBuffer::alloc(gpu, max_tokens.max(MAX_GEMV_TOKENS) * h * 2)?,
            prefill_act: DeviceBuffer::alloc(gpu, max_tokens * i * 2)?,
            ws: DeviceBuffer::alloc(gpu, ws * 4)?,
            counters: DeviceBuffer::zeroed(gpu, groups * 4)?,
            gemm_ws: DeviceBuffer::alloc(
                gpu,
                gemm_split_ws_elems(h, i, max_tokens, sms, bf16) * 4,
            )?,
            gemm_counters: DeviceBuffer::zeroed(gpu, (GEMM_MAX_RESIDENT * sms) as usize * 4)?,
            pack: DeviceBuffer::alloc(gpu, pack)?,
            pack_scales: DeviceBuffer::alloc(gpu, pack_scales)?,
            lora: super::lora::LoraScratch::new(gpu, max_tokens, layer.lora_pad())?,
            act_scales: DeviceBuffer::alloc(gpu, max_tokens * 4)?,
            mmq: match (
                layer.prefill_config().q4k_mmq || layer.prefill_config().w8a8,
                layer.prefill_config().nvfp4_mmq,
            ) {
                (true, _) => Some(super::mmq::MmqScratch::new(gpu, max_tokens, h.max(i))?),
                (false, true) => Some(super::mmq::MmqScratch::new(gpu, max_tokens, h)?),
                (false, false) => None,
            },
        })
    }

    /// The output buffer (bf16 `[max_tokens][hidden]`).
    pub fn output(&self) -> DevicePtr {
        self.out.ptr()
    }

    /// The prefill GEMM's split-K workspace and counters, when they hold a plan of `splits`
    /// over `tokens × n` outputs in `tiles` tiles.
    pub(crate) fn gemm_split_fits(&self, splits: u32, tokens: u32, n: u32, tiles: u32) -> bool {
        self.gemm_ws_fits(splits as usize * tokens as usize * n as usize, tiles)
    }

    /// Whether `elems` f32 of split-K partials and `tiles` counters fit this context.
    pub(crate) fn gemm_ws_fits(&self, elems: usize, tiles: u32) -> bool {
        elems * 4 <= self.gemm_ws.len() && tiles as usize * 4 <= self.gemm_counters.len()
    }

    /// Tokens per call this context holds.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Bytes of scratch held.
    pub fn bytes(&self) -> usize {
        [
            &self.g,
            &self.u,
            &self.a,
            &self.out,
            &self.prefill_act,
            &self.ws,
            &self.counters,
            &self.gemm_ws,
            &self.gemm_counters,
            &self.pack,
            &self.pack_scales,
            &self.act_scales,
        ]
        .iter()
        .map(|b| b.len())
        .sum::<usize>()
            + self.lora.bytes()
            + self.mmq.as_ref().map_or(0, |m| m.bytes())
    }
}
