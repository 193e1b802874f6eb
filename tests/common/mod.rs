//! Helpers shared by the integration tests.
#![allow(dead_code)]
use denseffn::backend::{DevicePtr, GpuBackend};
use denseffn::layer::{DenseFfnLayer, DenseFfnWeights, FfnActivation};
use denseffn::pack::{random_activations, Nvfp4Host};
use half::bf16;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::Arc;

/// Host copies of one layer's weights.
pub struct HostLayer {
    pub hidden: usize,
    pub inter: usize,
    pub gate: Nvfp4Host,
    pub up: Nvfp4Host,
    pub down: Nvfp4Host,
}

impl HostLayer {
    /// Quantized from Gaussian f32 (small shapes: exercises the quantizer too).
    pub fn quantized(hidden: usize, inter: usize, seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut q = |r, c, s: f32| {
            let w: Vec<f32> = random_activations(r * c, &mut rng)
                .into_iter()
                .map(|v| v * s)
                .collect();
            Nvfp4Host::quantize(&w, r, c).unwrap()
        };
        HostLayer {
            hidden,
            inter,
            gate: q(inter, hidden, 0.05),
            up: q(inter, hidden, 0.05),
            down: q(hidden, inter, 0.03),
        }
    }

    /// Random codes and scales (fast at model size). Global scales keep activations O(1).
    pub fn random(hidden: usize, inter: usize, seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let gs = 0.5 / (hidden as f32).sqrt();
        let ds = 0.5 / (inter as f32).sqrt();
        HostLayer {
            hidden,
            inter,
            gate: Nvfp4Host::random(inter, hidden, gs, &mut rng).unwrap(),
            up: Nvfp4Host::random(inter, hidden, gs, &mut rng).unwrap(),
            down: Nvfp4Host::random(hidden, inter, ds, &mut rng).unwrap(),
        }
    }

    pub fn layer(&self, gpu: &Arc<dyn GpuBackend>, act: FfnActivation) -> DenseFfnLayer {
        let w = DenseFfnWeights::upload(gpu, &self.gate, &self.up, &self.down).unwrap();
        DenseFfnLayer::new_with_activation(w, act, gpu.clone()).unwrap()
    }

    /// The f64 reference for `x` (`[m][hidden]`).
    pub fn reference(&self, x: &[f32], act: FfnActivation) -> Vec<f64> {
        denseffn::reference::ffn_f64(
            &self.gate.dequantize(),
            &self.up.dequantize(),
            &self.down.dequantize(),
            self.hidden,
            self.inter,
            x,
            act,
        )
    }
}

/// bf16 bytes of `x`.
pub fn bf16_bytes(x: &[f32]) -> Vec<u8> {
    x.iter()
        .flat_map(|&v| bf16::from_f32(v).to_bits().to_le_bytes())
        .collect()
}

/// Uploads bf16 activations into a fresh allocation.
pub fn upload_bf16(gpu: &Arc<dyn GpuBackend>, x: &[f32]) -> DevicePtr {
    let p = gpu.alloc(x.len() * 2).unwrap();
    gpu.upload(p, &bf16_bytes(x)).unwrap();
    p
}

/// Downloads `n` bf16 values as f64.
pub fn download_bf16(gpu: &Arc<dyn GpuBackend>, p: DevicePtr, n: usize) -> Vec<f64> {
    let mut b = vec![0u8; n * 2];
    gpu.download(&mut b, p).unwrap();
    b.chunks_exact(2)
        .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64())
        .collect()
}

/// Seeded N(0,1) bf16-representable activations.
pub fn activations(len: usize, seed: u64) -> Vec<f32> {
    random_activations(len, &mut SmallRng::seed_from_u64(seed))
}
