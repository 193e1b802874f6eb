//! Weight overlays: FP8 block-scaled, BF16 and ternary Q2_0 weight sets that replace the NVFP4
//! weights in dispatch, each kept on the device in its own tiled layout
//! (`denseffn_device::formats::tiles`), one copy serving decode, verify and prefill.
//!
//! Priority, on every path: Q2_0, then Q4_K, then FP8, then BF16, then the NVFP4 weights (see the README's
//! dispatch table). Installing an overlay is transactional: all three matrices are checked and
//! uploaded first; on any error (bad shape, bad value, out of memory) the layer is unchanged.
//! Every overlay is refused while LoRA deltas are installed, and LoRA while an overlay is
//! (`lora.rs`): the overlay paths do not apply the deltas.
use super::DenseFfnLayer;
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::pack_tiled::TiledHost;
use denseffn_device::formats::tiles::TileFormat;
use half::bf16;

/// The input of [`DenseFfnLayer::set_fp8_weights`]: E4M3 `[out, in]` with f32 scales per
/// 128×128 block, as FP8 checkpoints store them (`weight`, `weight_scale_inv`).
pub type Fp8Weight = crate::pack_fp8::Fp8Host;

/// The input of [`DenseFfnLayer::set_q2_weights`]: ggml `block_q2_0` blocks, row-major.
pub type PackedQ2Weight = crate::pack_q2::Q2Host;

/// The input of [`DenseFfnLayer::set_q4k_weights`]: ggml `block_q4_K` blocks, row-major (as
/// GGUF stores them).
pub type Q4kWeight = crate::pack_q4k::Q4kHost;

/// A dense BF16 matrix `[rows, cols]`, row-major: the input of
/// [`DenseFfnLayer::set_bf16_weights`].
#[derive(Clone, Debug, PartialEq)]
pub struct DenseWeight {
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// `rows · cols` values, row-major.
    pub data: Vec<bf16>,
}

/// Which overlay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OverlayKind {
    /// Ternary / 2-bit Q2_0.
    Q2,
    /// Native Q4_K (from GGUF).
    Q4k,
    /// FP8 E4M3, block-scaled.
    Fp8,
    /// BF16.
    Bf16,
}

impl OverlayKind {
    /// The name in errors, logs and tables.
    pub fn name(self) -> &'static str {
        match self {
            OverlayKind::Q2 => "q2_0",
            OverlayKind::Q4k => "q4k",
            OverlayKind::Fp8 => "fp8",
            OverlayKind::Bf16 => "bf16",
        }
    }

    /// The tiled layout this overlay keeps on the device.
    pub fn tile_format(self) -> TileFormat {
        match self {
            OverlayKind::Q2 => TileFormat::Q2,
            OverlayKind::Q4k => TileFormat::Q4k,
            OverlayKind::Fp8 => TileFormat::Fp8,
            OverlayKind::Bf16 => TileFormat::Bf16,
        }
    }
}

/// One overlay matrix on the device, in its tiled layout.
#[derive(Debug)]
pub struct TiledWeight {
    /// The layout.
    pub format: TileFormat,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// Tile codes.
    pub codes: DeviceBuffer,
    /// Tile scales (`None` for BF16, which has none).
    pub scales: Option<DeviceBuffer>,
    /// Per-tensor factor.
    pub global: f32,
}

impl TiledWeight {
    /// Bytes on the device.
    pub fn bytes(&self) -> usize {
        self.codes.len() + self.scales.as_ref().map_or(0, |s| s.len())
    }
}

/// An installed overlay: gate, up, down.
#[derive(Debug)]
pub struct Overlay {
    /// Which overlay.
    pub kind: OverlayKind,
    /// Gate `[intermediate, hidden]`.
    pub gate: TiledWeight,
    /// Up `[intermediate, hidden]`.
    pub up: TiledWeight,
    /// Down `[hidden, intermediate]`.
    pub down: TiledWeight,
    /// Q4_K MMQ copies (native Q4_K weights installed while the `q4k_mmq` arm was enabled).
    pub mmq: Option<super::MmqCopies>,
}

impl Overlay {
    /// Bytes of the tiled weights on the device (the MMQ copies are counted apart).
    pub fn bytes(&self) -> usize {
        self.gate.bytes() + self.up.bytes() + self.down.bytes()
    }
}

/// The overlay slots of a layer.
#[derive(Debug, Default)]
pub(crate) struct Overlays {
    pub q2: Option<Overlay>,
    pub q4k: Option<Overlay>,
    pub fp8: Option<Overlay>,
    pub bf16: Option<Overlay>,
}

impl Overlays {
    /// The overlay dispatch uses: the first installed of Q2_0, Q4_K, FP8, BF16.
    pub fn active(&self) -> Option<&Overlay> {
        self.q2
            .as_ref()
            .or(self.q4k.as_ref())
            .or(self.fp8.as_ref())
            .or(self.bf16.as_ref())
    }

    fn slot(&mut self, kind: OverlayKind) -> &mut Option<Overlay> {
        match kind {
            OverlayKind::Q2 => &mut self.q2,
            OverlayKind::Q4k => &mut self.q4k,
            OverlayKind::Fp8 => &mut self.fp8,
            OverlayKind::Bf16 => &mut self.bf16,
        }
    }

    pub fn bytes(&self) -> usize {
        [&self.q2, &self.q4k, &self.fp8, &self.bf16]
            .iter()
            .filter_map(|o| o.as_ref())
            .map(|o| o.bytes())
            .sum()
    }

    /// Bytes of the overlays' MMQ copies.
    pub fn mmq_bytes(&self) -> usize {
        [&self.q2, &self.q4k, &self.fp8, &self.bf16]
            .iter()
            .filter_map(|o| o.as_ref()?.mmq.as_ref())
            .map(|m| m.bytes())
            .sum()
    }
}

impl DenseFfnLayer {
    /// Installs native FP8 weights (E4M3, f32 scale per 128×128 block; shapes need not be
    /// multiples of 128, but rows must be a multiple of 16 and columns of 64). Decode, verify
    /// and km run `w8a16_gemv*`, prefill `w8a16_gemm*`. Replaces an earlier FP8 overlay.
    /// Refused while LoRA deltas are installed (this path would skip them).
    pub fn set_fp8_weights(
        &mut self,
        gate: &Fp8Weight,
        up: &Fp8Weight,
        down: &Fp8Weight,
    ) -> Result<()> {
        self.install(
            OverlayKind::Fp8,
            [
                ("gate", (gate.rows, gate.cols), &|n| {
                    TiledHost::from_fp8(n, gate)
                }),
                ("up", (up.rows, up.cols), &|n| TiledHost::from_fp8(n, up)),
                ("down", (down.rows, down.cols), &|n| {
                    TiledHost::from_fp8(n, down)
                }),
            ],
        )
    }

    /// Installs BF16 weights (kept on the device as bf16 tiles in the tensor cores' canonical
    /// layout, see `formats::tiles`). Decode runs `bf16_gemv*`; prefill and the small-batch
    /// paths (k2, k3, km) run the `bf16_gemm*` prefill arm, so such a layer never enters an
    /// NVFP4 kernel with the placeholder weights it may carry. Refused while LoRA deltas are
    /// installed.
    pub fn set_bf16_weights(
        &mut self,
        gate: &DenseWeight,
        up: &DenseWeight,
        down: &DenseWeight,
    ) -> Result<()> {
        let pack = |w: &DenseWeight, n: &str| TiledHost::from_bf16(n, w.rows, w.cols, &w.data);
        self.install(
            OverlayKind::Bf16,
            [
                ("gate", (gate.rows, gate.cols), &|n| pack(gate, n)),
                ("up", (up.rows, up.cols), &|n| pack(up, n)),
                ("down", (down.rows, down.cols), &|n| pack(down, n)),
            ],
        )
    }

    /// Installs ternary / 2-bit Q2_0 weights, kept packed (2 bits a value plus the f16 block
    /// scales). The highest-priority path: decode, verify, km (`q2_0_gemv*`) and prefill
    /// (`q2_0_gemm*`, a dequantize-to-bf16 `wgmma` GEMM). Whether the kernels are present is
    /// checked at forward time. Refused while LoRA deltas are installed (the Q2 path does not
    /// apply them).
    pub fn set_q2_weights(
        &mut self,
        gate: &PackedQ2Weight,
        up: &PackedQ2Weight,
        down: &PackedQ2Weight,
    ) -> Result<()> {
        self.install(
            OverlayKind::Q2,
            [
                ("gate", (gate.rows, gate.cols), &|n| {
                    TiledHost::from_q2(n, gate)
                }),
                ("up", (up.rows, up.cols), &|n| TiledHost::from_q2(n, up)),
                ("down", (down.rows, down.cols), &|n| {
                    TiledHost::from_q2(n, down)
                }),
            ],
        )
    }

    /// Installs native Q4_K weights (ggml `block_q4_K`, as loaded from GGUF), kept on the device
    /// as 4-bit tiles with per-row-sub-block f16 factors (`formats::tiles`, 5 bits a value).
    /// Decode, verify and km run `q4k_gemv*`, prefill `q4k_gemm*` (dequantize-to-bf16 tensor-core
    /// GEMM). Activations stay bf16 (staged as power-of-two-scaled f16), no int8 quantization.
    /// Refused while LoRA deltas are installed (LoRA is for NVFP4 weights only).
    /// With the `q4k_mmq` arm enabled ([`super::PrefillConfig`]) the blocks are also uploaded
    /// re-laid for it (losslessly, 4.5 bits a value), and prefill runs `q4k_mmq` instead.
    pub fn set_q4k_weights(
        &mut self,
        gate: &Q4kWeight,
        up: &Q4kWeight,
        down: &Q4kWeight,
    ) -> Result<()> {
        let shapes = [
            (gate.rows, gate.cols),
            (up.rows, up.cols),
            (down.rows, down.cols),
        ];
        let (h, i) = (self.hidden(), self.intermediate());
        let mmq = if shapes == [(i, h), (i, h), (h, i)] {
            self.q4k_mmq_for_install(gate, up, down)?
        } else {
            None // `install` reports the shape error
        };
        self.install(
            OverlayKind::Q4k,
            [
                ("gate", (gate.rows, gate.cols), &|n| {
                    TiledHost::from_q4k(n, gate)
                }),
                ("up", (up.rows, up.cols), &|n| TiledHost::from_q4k(n, up)),
                ("down", (down.rows, down.cols), &|n| {
                    TiledHost::from_q4k(n, down)
                }),
            ],
        )?;
        if let Some(o) = self.overlays.q4k.as_mut() {
            o.mmq = mmq;
        }
        Ok(())
    }

    /// Removes an overlay (no-op if absent); dispatch falls back to the next in priority.
    pub fn clear_overlay(&mut self, kind: OverlayKind) {
        *self.overlays.slot(kind) = None;
    }

    /// The overlay dispatch uses now (Q2_0, then Q4_K, then FP8, then BF16), if any.
    pub fn active_overlay(&self) -> Option<OverlayKind> {
        self.overlays.active().map(|o| o.kind)
    }

    /// Whether `kind` is installed.
    pub fn has_overlay(&self, kind: OverlayKind) -> bool {
        match kind {
            OverlayKind::Q2 => self.overlays.q2.is_some(),
            OverlayKind::Q4k => self.overlays.q4k.is_some(),
            OverlayKind::Fp8 => self.overlays.fp8.is_some(),
            OverlayKind::Bf16 => self.overlays.bf16.is_some(),
        }
    }

    /// Checks shapes, packs and uploads all three matrices, then swaps them in.
    #[allow(clippy::type_complexity)]
    fn install(
        &mut self,
        kind: OverlayKind,
        parts: [(&str, (usize, usize), &dyn Fn(&str) -> Result<TiledHost>); 3],
    ) -> Result<()> {
        if let Some(rank) = self.lora_rank() {
            return Err(Error::Unsupported(format!(
                "set_{}_weights: LoRA deltas (rank {rank}) are installed and the {} path does not apply them (LoRA is for NVFP4 weights only): clear_lora first",
                kind.name(),
                kind.name()
            )));
        }
        let (h, i) = (self.hidden(), self.intermediate());
        let want = [(i, h), (i, h), (h, i)];
        for ((name, shape, _), want) in parts.iter().zip(want) {
            if *shape != want {
                return Err(Error::Shape(format!(
                    "{} {name} is [{}, {}], the layer needs [{}, {}]",
                    kind.name(),
                    shape.0,
                    shape.1,
                    want.0,
                    want.1
                )));
            }
        }
        let gpu = &self.gpu;
        let upload = |(name, _, pack): (
            &str,
            (usize, usize),
            &dyn Fn(&str) -> Result<TiledHost>,
        )|
         -> Result<TiledWeight> {
            let t = pack(name)?;
            let scales = if t.scales.is_empty() {
                None
            } else {
                Some(DeviceBuffer::from_bytes(gpu, &t.scales)?)
            };
            Ok(TiledWeight {
                format: t.format,
                rows: t.rows,
                cols: t.cols,
                codes: DeviceBuffer::from_bytes(gpu, &t.codes)?,
                scales,
                global: t.global,
            })
        };
        let [g, u, d] = parts;
        // Each `?` drops what was uploaded before it: the layer is untouched until the swap.
        let (gate, up, down) = (upload(g)?, upload(u)?, upload(d)?);
        *self.overlays.slot(kind) = Some(Overlay {
            kind,
            gate,
            up,
            down,
            mmq: None,
        });
        Ok(())
    }
}
