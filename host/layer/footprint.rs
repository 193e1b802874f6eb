//! What a layer holds on the device, per buffer class.
use super::DenseFfnLayer;

/// Device bytes a layer holds, by class. Scratch belongs to each [`super::ForwardContext`]
/// ([`super::ForwardContext::bytes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// NVFP4 decode copies (tiled codes and scales of gate, up, down).
    pub decode_weights: usize,
    /// The prefill `_t` copies still held (the finalize paths free them).
    pub t_copies: usize,
    /// Load-time materialized copies for MMQ prefill arms: the Q4_K MMQ copies of an NVFP4
    /// layer (`finalize_q4k_load`) and of installed native Q4_K weights, and the W4A4 copies of
    /// gate and up (`finalize_nvfp4_mmq_load`).
    pub mmq_copies: usize,
    /// Overlay weights (FP8, BF16, Q2_0, Q4_K tiles).
    pub overlays: usize,
    /// LoRA matrices ([`super::DenseFfnLayer::set_lora_weights`]): bf16 `A` and `B` of gate,
    /// up and down at the rank padded to 16.
    pub lora: usize,
}

impl Footprint {
    /// All classes together.
    pub fn total(&self) -> usize {
        self.decode_weights + self.t_copies + self.mmq_copies + self.overlays + self.lora
    }
}

impl DenseFfnLayer {
    /// Device bytes held now, per buffer class.
    pub fn footprint(&self) -> Footprint {
        let w = self.weights();
        Footprint {
            decode_weights: w.decode_bytes(),
            t_copies: w.t_bytes(),
            overlays: self.overlays.bytes(),
            lora: self.lora_bytes(),
            mmq_copies: self.mmq.as_ref().map_or(0, |m| m.bytes())
                + self.nvfp4_mmq.as_ref().map_or(0, |m| m.bytes())
                + self.overlays.mmq_bytes(),
        }
    }
}
