//! The LoRA FFN overlay: low-rank deltas on the NVFP4 weights, `y = W·x + (alpha/rank)·B·(A·x)`
//! for each of gate, up and down (down's `x` is `act(g)⊙u`, from the LoRA-corrected `g`, `u`).
//!
//! On the device `A` (bf16 `[rank, in]`) and `B` (bf16 `[out, rank]`) are kept as given — bf16
//! is the dtype adapters are trained and shipped in (so nothing is rounded) and has f32's range
//! (so no scaling is needed) — with the rank padded to a multiple of 16 by zero rows of `A` and
//! zero columns of `B`. Per projection the delta costs one `lora_shrink` launch (`ax =
//! (alpha/rank)·A·x`, shared by gate and up, which read the same `x`) and nothing else: the
//! expansion `B·ax` runs in the epilogue of the GEMV / GEMM that computes `W·x` (the prefill
//! GEMMs' `_lora` entry points; `device/src/kernels/lora.rs`). So every NVFP4 path launches exactly 2 kernels more with
//! LoRA: `forward` 4 (SiLU) / 5 (GELU), `forward_k2`/`k3` 5, `forward_km` 6, prefill 4. The
//! GEMV/GEMM right after a shrink is launched as its programmatic dependent
//! ([`crate::backend::GpuBackend::launch_dependent`]), so the shrink overlaps its main loop.
//!
//! LoRA applies to the NVFP4 weights only: installing it is refused while an overlay (Q2_0,
//! Q4_K, FP8, BF16) is installed, installing an overlay is refused while LoRA is, and a layer
//! with placeholder NVFP4 weights refuses it. Installing is transactional.
use super::{DenseFfnLayer, DenseWeight, ForwardContext};
use crate::backend::{DevicePtr, Launch};
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use denseffn_device::params::{
    GemmParams, GemvParams, LoraShrinkParams, ParamBlock, LORA_MAX_RANK, LORA_RANK_STEP,
    LORA_SHRINK_MAX_SPLIT_GROUPS, LORA_SHRINK_SMEM, LORA_SHRINK_STEP, LORA_SHRINK_THREADS,
    LORA_SHRINK_TOKENS,
};
use half::bf16;

/// The largest LoRA rank [`DenseFfnLayer::set_lora_weights`] takes.
pub const MAX_LORA_RANK: usize = LORA_MAX_RANK as usize;

/// One projection's LoRA matrices: `a` bf16 `[rank, in]` and `b` bf16 `[out, rank]`, row-major
/// (PEFT's `lora_A` / `lora_B` weights).
#[derive(Clone, Debug, PartialEq)]
pub struct LoraProjection {
    /// `A`: `[rank, in]` (`in` = hidden for gate/up, intermediate for down).
    pub a: DenseWeight,
    /// `B`: `[out, rank]` (`out` = intermediate for gate/up, hidden for down).
    pub b: DenseWeight,
}

/// The input of [`DenseFfnLayer::set_lora_weights`]: one adapter per projection, sharing `rank`
/// and `alpha`; each projection computes `y = W·x + (alpha/rank)·B·(A·x)`.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraFfnWeights {
    /// Rank, 1..=[`MAX_LORA_RANK`].
    pub rank: usize,
    /// LoRA alpha (finite); the delta is scaled by `alpha / rank`.
    pub alpha: f32,
    /// Gate: `a` `[rank, hidden]`, `b` `[intermediate, rank]`.
    pub gate: LoraProjection,
    /// Up: `a` `[rank, hidden]`, `b` `[intermediate, rank]`.
    pub up: LoraProjection,
    /// Down: `a` `[rank, intermediate]`, `b` `[hidden, rank]`.
    pub down: LoraProjection,
}

impl LoraProjection {
    /// `W + scale·B·A` for `W` f32 `[out, in]` row-major (accumulated in f64): the dense
    /// weights this adapter turns `W` into.
    pub fn merge(&self, w: &[f32], scale: f32) -> Result<Vec<f32>> {
        let (rank, out, inp) = (self.a.rows, self.b.rows, self.a.cols);
        if self.b.cols != rank || w.len() != out * inp || self.a.data.len() != rank * inp {
            return Err(Error::Shape(format!(
                "LoRA merge: A [{rank}, {inp}], B [{out}, {}], W of {} values",
                self.b.cols,
                w.len()
            )));
        }
        let a: Vec<f64> = self.a.data.iter().map(|v| v.to_f64()).collect();
        let mut merged = Vec::with_capacity(w.len());
        for (o, wrow) in w.chunks_exact(inp).enumerate() {
            let brow = &self.b.data[o * rank..(o + 1) * rank];
            merged.extend(wrow.iter().enumerate().map(|(c, &wv)| {
                let d: f64 = brow
                    .iter()
                    .enumerate()
                    .map(|(r, b)| b.to_f64() * a[r * inp + c])
                    .sum();
                (wv as f64 + scale as f64 * d) as f32
            }));
        }
        Ok(merged)
    }
}

impl LoraFfnWeights {
    /// `alpha / rank`, the factor of every delta.
    pub fn scale(&self) -> f32 {
        self.alpha / self.rank as f32
    }

    /// Gate, up and down with the deltas merged in ([`LoraProjection::merge`]): the dense
    /// weights a LoRA layer computes with (the tests' f64 reference runs on these).
    pub fn merge(&self, [gate, up, down]: [&[f32]; 3]) -> Result<[Vec<f32>; 3]> {
        Ok([
            self.gate.merge(gate, self.scale())?,
            self.up.merge(up, self.scale())?,
            self.down.merge(down, self.scale())?,
        ])
    }
}

impl DenseWeight {
    /// Rows `r0..r1`.
    fn rows_slice(&self, r0: usize, r1: usize) -> DenseWeight {
        DenseWeight {
            rows: r1 - r0,
            cols: self.cols,
            data: self.data[r0 * self.cols..r1 * self.cols].to_vec(),
        }
    }

    /// Columns `c0..c1`.
    fn cols_slice(&self, c0: usize, c1: usize) -> DenseWeight {
        DenseWeight {
            rows: self.rows,
            cols: c1 - c0,
            data: self
                .data
                .chunks_exact(self.cols)
                .flat_map(|row| row[c0..c1].iter().copied())
                .collect(),
        }
    }
}

impl LoraFfnWeights {
    /// Splits the adapters for `world` tensor-parallel ranks as `shard::shard_ffn` and
    /// `HostFfn::shard` split the FFN (rank r: the r-th contiguous slice of the intermediate
    /// dimension): gate and up keep `A` whole and take the slice's rows of `B`; down takes the
    /// slice's columns of `A` and keeps `B` whole, so its rank deltas are partial sums that the
    /// FFN's all-reduce adds up like the rank outputs themselves. Install shard r on rank r's
    /// layer.
    pub fn shard(&self, world: usize) -> Result<Vec<LoraFfnWeights>> {
        let inter = self.gate.b.rows;
        let consistent = self.up.b.rows == inter
            && self.down.a.cols == inter
            && [&self.gate, &self.up, &self.down].iter().all(|p| {
                p.a.data.len() == p.a.rows * p.a.cols && p.b.data.len() == p.b.rows * p.b.cols
            });
        if world == 0 || inter % world != 0 || !consistent {
            return Err(Error::Shape(format!(
                "cannot split LoRA adapters of intermediate {inter} over {world} ranks"
            )));
        }
        let share = inter / world;
        Ok((0..world)
            .map(|r| {
                let (s0, s1) = (r * share, (r + 1) * share);
                let column = |p: &LoraProjection| LoraProjection {
                    a: p.a.clone(),
                    b: p.b.rows_slice(s0, s1),
                };
                LoraFfnWeights {
                    rank: self.rank,
                    alpha: self.alpha,
                    gate: column(&self.gate),
                    up: column(&self.up),
                    down: LoraProjection {
                        a: self.down.a.cols_slice(s0, s1),
                        b: self.down.b.clone(),
                    },
                }
            })
            .collect())
    }
}

/// An installed LoRA overlay on the device.
#[derive(Debug)]
pub(crate) struct LoraDevice {
    rank: usize,
    /// The rank padded to a multiple of 16.
    pad: u32,
    /// `alpha / rank`.
    scale: f32,
    /// `A` of gate, up, down: bf16 `[pad, in]`.
    a: [DeviceBuffer; 3],
    /// `B` of gate, up, down: bf16 `[out, pad]`.
    b: [DeviceBuffer; 3],
}

impl LoraDevice {
    fn bytes(&self) -> usize {
        self.a.iter().chain(&self.b).map(|b| b.len()).sum()
    }
}

/// Which LoRA projection a GEMV/GEMM applies: gate (with up for the dual kernels), up, down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoraSlot {
    Gate = 0,
    Up = 1,
    Down = 2,
}

/// The LoRA scratch of a [`ForwardContext`]: `ax` f32 `[3][tokens][pad]` (gate, up, down), the
/// shrink's split-K partials and its counters.
pub(crate) struct LoraScratch {
    ax: DeviceBuffer,
    ws: DeviceBuffer,
    counters: DeviceBuffer,
}

impl LoraScratch {
    /// Scratch for up to 8 tokens at any rank, and for `max_tokens` at padded rank `pad` (the
    /// layer's LoRA when the context is made, 0 without).
    pub(crate) fn new(
        gpu: &std::sync::Arc<dyn crate::backend::GpuBackend>,
        max_tokens: usize,
        pad: usize,
    ) -> Result<Self> {
        let decode = 3 * LORA_SHRINK_TOKENS as usize * MAX_LORA_RANK;
        let ax = decode.max(3 * max_tokens * pad);
        let ws = LORA_SHRINK_MAX_SPLIT_GROUPS as usize
            * LORA_RANK_STEP as usize
            * 2
            * LORA_SHRINK_TOKENS as usize;
        let counters = 2 * MAX_LORA_RANK / LORA_RANK_STEP as usize;
        Ok(LoraScratch {
            ax: DeviceBuffer::alloc(gpu, ax * 4)?,
            ws: DeviceBuffer::alloc(gpu, ws * 4)?,
            counters: DeviceBuffer::zeroed(gpu, counters * 4)?,
        })
    }

    pub(crate) fn bytes(&self) -> usize {
        self.ax.len() + self.ws.len() + self.counters.len()
    }
}

/// `A` padded to `pad` rows, `B` to `pad` columns, as bf16 bytes; every shape and value checked.
fn padded(
    name: &str,
    w: &LoraProjection,
    (rank, pad): (usize, usize),
    (out, inp): (usize, usize),
) -> Result<(Vec<u8>, Vec<u8>)> {
    for (what, m, rows, cols) in [("A", &w.a, rank, inp), ("B", &w.b, out, rank)] {
        if (m.rows, m.cols) != (rows, cols) || m.data.len() != rows * cols {
            return Err(Error::Shape(format!(
                "LoRA {name} {what} is [{}, {}] with {} values, the layer needs [{rows}, {cols}]",
                m.rows,
                m.cols,
                m.data.len()
            )));
        }
        if let Some(i) = m.data.iter().position(|v| !v.is_finite()) {
            return Err(Error::BadWeights(format!(
                "LoRA {name} {what}[{}, {}] is {}",
                i / cols,
                i % cols,
                m.data[i]
            )));
        }
    }
    let bytes = |v: &mut dyn Iterator<Item = bf16>| -> Vec<u8> {
        v.flat_map(|x| x.to_bits().to_le_bytes()).collect()
    };
    let zero = bf16::ZERO;
    let a = bytes(
        &mut w
            .a
            .data
            .iter()
            .copied()
            .chain(std::iter::repeat_n(zero, (pad - rank) * inp)),
    );
    let b = bytes(&mut w.b.data.chunks_exact(rank).flat_map(|row| {
        row.iter()
            .copied()
            .chain(std::iter::repeat_n(zero, pad - rank))
    }));
    Ok((a, b))
}

/// The schedule of one `lora_shrink` launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShrinkPlan {
    /// K splits (grid.x).
    pub splits: u32,
    /// Columns per split (a multiple of 512).
    pub cols_per_split: u32,
    /// The grid: (splits, rank groups of 16, projections × 8-token groups).
    pub grid: (u32, u32, u32),
}

impl ShrinkPlan {
    /// Plans `projs` projections of padded rank `pad` over `k` columns and `tokens` tokens on
    /// `sm_count` SMs: up to 8 tokens, enough K splits for about two blocks per SM (at most
    /// [`LORA_SHRINK_MAX_SPLIT_GROUPS`] splits × rank groups); more tokens, one split (their
    /// 8-token groups give the parallelism).
    pub fn new(k: usize, tokens: usize, pad: usize, projs: usize, sm_count: u32) -> Self {
        let groups = (pad as u32 / LORA_RANK_STEP).max(1);
        let steps = (k as u32).div_ceil(LORA_SHRINK_STEP).max(1);
        let splits = if tokens <= LORA_SHRINK_TOKENS as usize {
            let base = projs as u32 * groups;
            (2 * sm_count)
                .div_ceil(base)
                .min(steps)
                .min(LORA_SHRINK_MAX_SPLIT_GROUPS / groups)
                .max(1)
        } else {
            1
        };
        let cols_per_split = steps.div_ceil(splits) * LORA_SHRINK_STEP;
        let splits = (k as u32).div_ceil(cols_per_split).max(1);
        let tgroups = (tokens as u32).div_ceil(LORA_SHRINK_TOKENS);
        ShrinkPlan {
            splits,
            cols_per_split,
            grid: (splits, groups, projs as u32 * tgroups),
        }
    }
}

impl DenseFfnLayer {
    /// Installs LoRA deltas on the NVFP4 weights: afterwards gate, up and down each compute
    /// `y = W·x + (alpha/rank)·B·(A·x)` on decode (`forward`, SiLU and GELU), verify
    /// (`forward_k2`/`k3`), `forward_km` (m ≤ 8), `forward_batched` and the `nvfp4_t_m128`
    /// prefill arm. Each path launches 2 kernels more (one `lora_shrink` before gate+up, one
    /// before down; the `B` expansion is fused into the GEMV/GEMM epilogues): `forward` 4
    /// (SiLU) / 5 (GELU), `forward_k2`/`k3` 5, `forward_km` 6, prefill 4.
    ///
    /// Refused (`Error::Unsupported`, naming the overlay) while a Q2_0, Q4_K, FP8 or BF16
    /// overlay is installed (their paths do not apply the deltas; LoRA is for NVFP4 weights
    /// only), for placeholder NVFP4 weights, and after `finalize_q4k_load` or
    /// `finalize_nvfp4_mmq_load` made MMQ copies
    /// (that arm does not apply them either; `finalize_q4k_load` is refused while LoRA is
    /// installed). Checked: rank 1..=[`MAX_LORA_RANK`], every
    /// shape (`a` `[rank, in]`, `b` `[out, rank]` of the layer's projections), every value and
    /// `alpha` finite. Replaces an earlier LoRA. Transactional: on any error (including out of
    /// memory) the layer is exactly as it was. Device bytes: `2·pad·(3·hidden + 3·inter)`
    /// (`pad` = rank rounded up to 16), [`super::Footprint::lora`].
    ///
    /// Contexts: a [`ForwardContext`] always holds LoRA scratch for up to 8 tokens at any rank;
    /// for prefill of more tokens with LoRA, make it after this call (it then holds
    /// `12·max_tokens·pad` bytes more); an older context's prefill is a clear error.
    pub fn set_lora_weights(&mut self, w: LoraFfnWeights) -> Result<()> {
        if let Some(kind) = self.active_overlay() {
            return Err(Error::Unsupported(format!(
                "set_lora_weights: a {} overlay is installed, and its paths do not apply LoRA deltas (LoRA is for NVFP4 weights only): clear_overlay first",
                kind.name()
            )));
        }
        if self.weights.placeholder {
            return Err(Error::Unsupported(
                "set_lora_weights: the layer holds placeholder NVFP4 weights; LoRA applies to real NVFP4 weights only".into(),
            ));
        }
        if self.mmq.is_some() {
            return Err(Error::Unsupported(
                "set_lora_weights: finalize_q4k_load made this layer's prefill run the q4k_mmq arm (and freed the `_t` copies), which does not apply LoRA deltas".into(),
            ));
        }
        if self.nvfp4_mmq.is_some() {
            return Err(Error::Unsupported(
                "set_lora_weights: finalize_nvfp4_mmq_load made this layer's prefill run the nvfp4_mmq arm (and freed the gate/up `_t` copies), which does not apply LoRA deltas".into(),
            ));
        }
        if !(1..=MAX_LORA_RANK).contains(&w.rank) {
            return Err(Error::Shape(format!(
                "LoRA rank {} is outside 1..={MAX_LORA_RANK}",
                w.rank
            )));
        }
        if !w.alpha.is_finite() {
            return Err(Error::BadWeights(format!("LoRA alpha is {}", w.alpha)));
        }
        let (h, i) = (self.hidden(), self.intermediate());
        let step = LORA_RANK_STEP as usize;
        let ranks = (w.rank, w.rank.div_ceil(step) * step);
        let gate = padded("gate", &w.gate, ranks, (i, h))?;
        let up = padded("up", &w.up, ranks, (i, h))?;
        let down = padded("down", &w.down, ranks, (h, i))?;
        let gpu = &self.gpu;
        let up_b = |v: &[u8]| DeviceBuffer::from_bytes(gpu, v);
        // Each `?` drops what was uploaded before it: the layer is untouched until the swap.
        let a = [up_b(&gate.0)?, up_b(&up.0)?, up_b(&down.0)?];
        let b = [up_b(&gate.1)?, up_b(&up.1)?, up_b(&down.1)?];
        self.lora = Some(LoraDevice {
            rank: w.rank,
            pad: ranks.1 as u32,
            scale: w.scale(),
            a,
            b,
        });
        Ok(())
    }

    /// Removes the LoRA deltas (no-op without them): every path computes the plain NVFP4
    /// result again, with its plain launch count.
    pub fn clear_lora(&mut self) {
        self.lora = None;
    }

    /// The installed LoRA rank, if any.
    pub fn lora_rank(&self) -> Option<usize> {
        self.lora.as_ref().map(|l| l.rank)
    }

    /// Device bytes of the LoRA matrices (0 without).
    pub(crate) fn lora_bytes(&self) -> usize {
        self.lora.as_ref().map_or(0, LoraDevice::bytes)
    }

    /// The padded rank a new [`ForwardContext`] sizes its prefill LoRA scratch for.
    pub(crate) fn lora_pad(&self) -> usize {
        self.lora.as_ref().map_or(0, |l| l.pad as usize)
    }

    /// `names` split into the part before and after the down projection's input, with one
    /// `lora_shrink` in front of each when LoRA is installed (the launch order).
    pub(crate) fn with_lora(
        &self,
        gate_up: &[&'static str],
        down: &[&'static str],
    ) -> Vec<&'static str> {
        let shrink = self.lora.as_ref().map(|_| super::kernels::LORA_SHRINK);
        shrink
            .into_iter()
            .chain(gate_up.iter().copied())
            .chain(shrink)
            .chain(down.iter().copied())
            .collect()
    }

    /// Errors unless `ctx` holds the LoRA `ax` scratch for `tokens` tokens (always true for
    /// ≤ 8 tokens, and without LoRA).
    pub(crate) fn check_lora_ctx(&self, ctx: &ForwardContext, tokens: usize) -> Result<()> {
        let Some(l) = &self.lora else { return Ok(()) };
        let need = 3 * tokens * l.pad as usize * 4;
        if ctx.lora.ax.len() < need {
            return Err(Error::Invalid(format!(
                "this ForwardContext holds LoRA scratch for {} bytes, {tokens} tokens at LoRA rank {} need {need}: it was made before set_lora_weights; make a new ForwardContext",
                ctx.lora.ax.len(),
                l.rank
            )));
        }
        Ok(())
    }

    /// `lora_shrink` of gate and up over the bf16 input (`m` tokens) into `ax` slots 0 and 1.
    /// No-op without LoRA.
    pub(crate) fn lora_shrink_gate_up(
        &self,
        input: DevicePtr,
        m: usize,
        ctx: &ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let src = (
            denseffn_device::params::source::BF16,
            input,
            DevicePtr::NULL,
        );
        self.lora_shrink(LoraSlot::Gate, src, m, ctx, stream)
    }

    /// `lora_shrink` of down over its input (`src`: a `source::*` and its one or two buffers)
    /// into `ax` slot 2. No-op without LoRA.
    pub(crate) fn lora_shrink_down(
        &self,
        src: (u32, DevicePtr, DevicePtr),
        m: usize,
        ctx: &ForwardContext,
        stream: u64,
    ) -> Result<()> {
        self.lora_shrink(LoraSlot::Down, src, m, ctx, stream)
    }

    fn lora_shrink(
        &self,
        slot: LoraSlot,
        (source, act0, act1): (u32, DevicePtr, DevicePtr),
        m: usize,
        ctx: &ForwardContext,
        stream: u64,
    ) -> Result<()> {
        let Some(l) = &self.lora else { return Ok(()) };
        let (k, a1, projs) = match slot {
            LoraSlot::Down => (self.intermediate(), 0, 1),
            _ => (self.hidden(), l.a[1].ptr().0, 2),
        };
        let plan = ShrinkPlan::new(k, m, l.pad as usize, projs, self.gpu.sm_count());
        if plan.grid.2 > 65535 {
            return Err(Error::Invalid(format!(
                "LoRA: {m} tokens are more than one lora_shrink launch takes"
            )));
        }
        let p = LoraShrinkParams {
            a0: l.a[slot as usize].ptr().0,
            a1,
            act0: act0.0,
            act1: act1.0,
            out: self.lora_ax(ctx, slot, m, l.pad).0,
            ws: ctx.lora.ws.ptr().0,
            counters: ctx.lora.counters.ptr().0,
            scale: l.scale,
            k: k as u32,
            tokens: m as u32,
            rank: l.pad,
            splits: plan.splits,
            cols_per_split: plan.cols_per_split,
            source,
            _pad: 0,
        };
        let launch = Launch {
            kernel: super::kernels::LORA_SHRINK,
            grid: plan.grid,
            block: (LORA_SHRINK_THREADS, 1, 1),
            smem: LORA_SHRINK_SMEM,
            params: p.as_bytes(),
        };
        self.gpu.launch(&launch, stream)
    }

    /// `ax` slot `slot` of a call of `m` tokens: f32 `[m][pad]` at `slot·m·pad`.
    fn lora_ax(&self, ctx: &ForwardContext, slot: LoraSlot, m: usize, pad: u32) -> DevicePtr {
        ctx.lora
            .ax
            .ptr()
            .offset(slot as usize * m * pad as usize * 4)
    }

    /// A GEMV's or GEMM's LoRA fields `(lora_b0, lora_b1, lora_ax, lora_rank)` for projection
    /// `slot` (and `slot + 1` as projection 1 when `dual`) over `m` tokens; `None` without LoRA.
    fn lora_fields(
        &self,
        slot: LoraSlot,
        dual: bool,
        m: usize,
        ctx: &ForwardContext,
    ) -> Option<(u64, u64, u64, u32)> {
        let l = self.lora.as_ref()?;
        let s = slot as usize;
        let b1 = if dual { l.b[s + 1].ptr().0 } else { 0 };
        let ax = self.lora_ax(ctx, slot, m, l.pad).0;
        Some((l.b[s].ptr().0, b1, ax, l.pad))
    }

    /// Sets a GEMV's LoRA fields (no-op without LoRA).
    pub(crate) fn lora_gemv(
        &self,
        p: &mut GemvParams,
        slot: LoraSlot,
        m: usize,
        ctx: &ForwardContext,
    ) {
        if let Some(f) = self.lora_fields(slot, p.w1 != 0, m, ctx) {
            (p.lora_b0, p.lora_b1, p.lora_ax, p.lora_rank) = f;
        }
    }

    /// Sets a prefill GEMM's LoRA fields (no-op without LoRA).
    pub(crate) fn lora_gemm(
        &self,
        p: &mut GemmParams,
        slot: LoraSlot,
        n: usize,
        ctx: &ForwardContext,
    ) {
        if let Some(f) = self.lora_fields(slot, p.w1 != 0, n, ctx) {
            (p.lora_b0, p.lora_b1, p.lora_ax, p.lora_rank) = f;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrink_plans_cover_k_and_bound_the_workspace() {
        for k in [64usize, 576, 4096, 8192, 14336, 28672] {
            for pad in [16usize, 64, 128, 256] {
                for (tokens, projs) in [(1, 2), (8, 1), (9, 2), (4096, 1)] {
                    let p = ShrinkPlan::new(k, tokens, pad, projs, 132);
                    assert!(p.splits * p.cols_per_split >= k as u32, "{k} {pad} {p:?}");
                    assert!(
                        (p.splits - 1) * p.cols_per_split < k as u32,
                        "{k} {pad} {p:?}"
                    );
                    assert_eq!(p.cols_per_split % LORA_SHRINK_STEP, 0);
                    assert!(p.splits * (pad as u32 / 16) <= LORA_SHRINK_MAX_SPLIT_GROUPS);
                    if tokens > 8 {
                        assert_eq!(p.splits, 1);
                    }
                    assert_eq!(p.grid.2, projs as u32 * (tokens as u32).div_ceil(8));
                }
            }
        }
    }
}
