//! NVFP4 weights on the device: the decode copies (tiled) and the prefill `_t` copies.
use crate::backend::GpuBackend;
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::pack::Nvfp4Host;
use std::sync::Arc;

/// One NVFP4 matrix `[rows, cols]` on the device: codes, E4M3 scales, global scale.
#[derive(Debug)]
pub struct Nvfp4Weight {
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// Codes (tiled layout for decode copies, ModelOpt layout for `_t` copies).
    pub codes: DeviceBuffer,
    /// E4M3 scales in the matching layout.
    pub scales: DeviceBuffer,
    /// Per-tensor scale.
    pub global: f32,
}

impl Nvfp4Weight {
    /// Bytes on the device.
    pub fn bytes(&self) -> usize {
        self.codes.len() + self.scales.len()
    }
}

/// The layer's NVFP4 weights. `gate`, `up`: `[intermediate, hidden]`; `down`: `[hidden,
/// intermediate]`.
///
/// Decode copies are in the tiled layout (`denseffn_device::formats::nvfp4`: 16×64 tiles in
/// `mma` fragment order). The `_t` copies are what the prefill GEMM (`gemm_nvfp4_t_*`) reads:
/// today the same tiled layout — the layout that GEMM wants, A-fragments loaded straight from
/// global memory — kept as separate buffers so the finalize paths can free them (hence
/// `Option`) and a prefill-specific order can replace them without touching decode.
#[derive(Debug)]
pub struct DenseFfnWeights {
    /// Model width.
    pub hidden: usize,
    /// FFN width.
    pub intermediate: usize,
    /// Gate projection, decode layout.
    pub gate: Nvfp4Weight,
    /// Up projection, decode layout.
    pub up: Nvfp4Weight,
    /// Down projection, decode layout.
    pub down: Nvfp4Weight,
    /// Gate projection, prefill layout.
    pub gate_t: Option<Nvfp4Weight>,
    /// Up projection, prefill layout.
    pub up_t: Option<Nvfp4Weight>,
    /// Down projection, prefill layout.
    pub down_t: Option<Nvfp4Weight>,
    /// True for [`DenseFfnWeights::placeholder`]: the NVFP4 buffers hold no matrix and no
    /// NVFP4 kernel may read them (the paths refuse with `Unsupported` unless an overlay is
    /// installed).
    pub placeholder: bool,
}

impl DenseFfnWeights {
    /// Checks shapes and values, then uploads the decode and `_t` copies. On any error nothing
    /// stays allocated.
    pub fn upload(
        gpu: &Arc<dyn GpuBackend>,
        gate: &Nvfp4Host,
        up: &Nvfp4Host,
        down: &Nvfp4Host,
    ) -> Result<Self> {
        let (inter, hidden) = (gate.rows, gate.cols);
        for (name, w, rows, cols) in [
            ("gate", gate, inter, hidden),
            ("up", up, inter, hidden),
            ("down", down, hidden, inter),
        ] {
            w.validate(name)?;
            if (w.rows, w.cols) != (rows, cols) {
                return Err(Error::Shape(format!(
                    "{name} is [{}, {}], expected [{rows}, {cols}] (gate [intermediate, hidden] = [{inter}, {hidden}])",
                    w.rows, w.cols
                )));
            }
        }
        let tiled = |name: &str, w: &Nvfp4Host| -> Result<Nvfp4Weight> {
            let (codes, scales) = w.to_tiled(name)?;
            Ok(Nvfp4Weight {
                rows: w.rows,
                cols: w.cols,
                codes: DeviceBuffer::from_bytes(gpu, &codes)?,
                scales: DeviceBuffer::from_bytes(gpu, &scales)?,
                global: w.global,
            })
        };
        Ok(DenseFfnWeights {
            hidden,
            intermediate: inter,
            gate: tiled("gate", gate)?,
            up: tiled("up", up)?,
            down: tiled("down", down)?,
            gate_t: Some(tiled("gate_t", gate)?),
            up_t: Some(tiled("up_t", up)?),
            down_t: Some(tiled("down_t", down)?),
            placeholder: false,
        })
    }

    /// Placeholder NVFP4 weights of the right shape for a layer whose weights come from an
    /// overlay (`set_bf16_weights`, `set_fp8_weights`, `set_q2_weights`, `set_q4k_weights`):
    /// 16-byte buffers, no `_t` copies. Every NVFP4 path of such a layer is an `Unsupported`
    /// error; with an overlay installed, every path runs the overlay's kernels.
    pub fn placeholder(
        gpu: &Arc<dyn GpuBackend>,
        hidden: usize,
        intermediate: usize,
    ) -> Result<Self> {
        if hidden == 0 || intermediate == 0 {
            return Err(Error::Shape(format!(
                "placeholder weights: zero-sized layer {hidden} × {intermediate}"
            )));
        }
        let w = |rows, cols| -> Result<Nvfp4Weight> {
            Ok(Nvfp4Weight {
                rows,
                cols,
                codes: DeviceBuffer::zeroed(gpu, 16)?,
                scales: DeviceBuffer::zeroed(gpu, 16)?,
                global: 0.0,
            })
        };
        Ok(DenseFfnWeights {
            hidden,
            intermediate,
            gate: w(intermediate, hidden)?,
            up: w(intermediate, hidden)?,
            down: w(hidden, intermediate)?,
            gate_t: None,
            up_t: None,
            down_t: None,
            placeholder: true,
        })
    }

    /// Bytes of the decode copies (what one decode step streams).
    pub fn decode_bytes(&self) -> usize {
        self.gate.bytes() + self.up.bytes() + self.down.bytes()
    }

    /// Bytes of the `_t` copies still held.
    pub fn t_bytes(&self) -> usize {
        [&self.gate_t, &self.up_t, &self.down_t]
            .iter()
            .filter_map(|w| w.as_ref())
            .map(|w| w.bytes())
            .sum()
    }
}
