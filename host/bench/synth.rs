//! Seeded synthetic weights and inputs at model size, fast to make (no f32 pass), with scales
//! that keep activations O(1) through the FFN.
use crate::backend::GpuBackend;
use crate::buffer::DeviceBuffer;
use crate::layer::{
    DenseFfnLayer, DenseFfnWeights, DenseWeight, FfnActivation, LoraFfnWeights, LoraProjection,
};
use crate::pack::{random_activations, Nvfp4Host};
use crate::pack_fp8::Fp8Host;
use crate::pack_q2::Q2Host;
use crate::pack_q4k::Q4kHost;
use crate::Result;
use half::bf16;
use rand::{Rng, RngCore};
use std::sync::Arc;

/// Random NVFP4 gate `[i, h]`, up `[i, h]` and down `[h, i]`.
pub fn nvfp4_ffn(
    h: usize,
    i: usize,
    rng: &mut impl RngCore,
) -> Result<(Nvfp4Host, Nvfp4Host, Nvfp4Host)> {
    let (gs, ds) = (0.5 / (h as f32).sqrt(), 0.5 / (i as f32).sqrt());
    Ok((
        Nvfp4Host::random(i, h, gs, rng)?,
        Nvfp4Host::random(i, h, gs, rng)?,
        Nvfp4Host::random(h, i, ds, rng)?,
    ))
}

/// A random NVFP4 layer of `h × i` with activation `act` on `gpu`.
pub fn nvfp4_layer(
    gpu: &Arc<dyn GpuBackend>,
    h: usize,
    i: usize,
    act: FfnActivation,
    rng: &mut impl RngCore,
) -> Result<DenseFfnLayer> {
    let (gate, up, down) = nvfp4_ffn(h, i, rng)?;
    DenseFfnLayer::new_with_activation(
        DenseFfnWeights::upload(gpu, &gate, &up, &down)?,
        act,
        gpu.clone(),
    )
}

/// Random bf16 activations, N(0, 1), `len` values on `gpu`.
pub fn activations(
    gpu: &Arc<dyn GpuBackend>,
    len: usize,
    rng: &mut impl RngCore,
) -> Result<DeviceBuffer> {
    let b: Vec<u8> = random_activations(len, rng)
        .iter()
        .flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes())
        .collect();
    DeviceBuffer::from_bytes(gpu, &b)
}

/// `len` random finite bf16 values of magnitude 2^-7..2^-6 on `gpu` (anchor weights and
/// buffers, fast to make at model size).
pub fn small_bf16(
    gpu: &Arc<dyn GpuBackend>,
    len: usize,
    rng: &mut impl RngCore,
) -> Result<DeviceBuffer> {
    let mut b = vec![0u8; len * 2];
    rng.fill_bytes(&mut b);
    for c in b.chunks_exact_mut(2) {
        let v = (u16::from_le_bytes([c[0], c[1]]) & 0x807F) | 0x3C00;
        c.copy_from_slice(&v.to_le_bytes());
    }
    DeviceBuffer::from_bytes(gpu, &b)
}

/// Random E4M3 codes (no NaN) `[r, c]` with block scales keeping activations O(1).
pub fn fp8(r: usize, c: usize, rng: &mut impl RngCore) -> Fp8Host {
    let mut weight = vec![0u8; r * c];
    rng.fill_bytes(&mut weight);
    for b in &mut weight {
        *b &= 0xB7; // |value| ≤ 2^(6-7)·1.875: finite, never NaN
    }
    let (br, bc) = Fp8Host::scale_dims(r, c);
    let s = 1.0 / (c as f32).sqrt();
    let scale_inv = (0..br * bc)
        .map(|_| s * rng.random_range(0.5f32..1.0))
        .collect();
    Fp8Host {
        rows: r,
        cols: c,
        weight,
        scale_inv,
    }
}

/// Random ternary Q2_0 blocks `[r, c]` (`c` a multiple of 64) with d ~ 1/sqrt(c).
pub fn q2(r: usize, c: usize, rng: &mut impl RngCore) -> Q2Host {
    let nb = r * c / 64;
    let d = half::f16::from_f32(1.0 / (c as f32).sqrt())
        .to_bits()
        .to_le_bytes();
    let mut blocks = vec![0u8; nb * 18];
    for b in blocks.chunks_exact_mut(18) {
        b[..2].copy_from_slice(&d);
        for q in &mut b[2..] {
            // four codes in {0, 1, 2}
            let mut v = 0u8;
            for j in 0..4 {
                v |= (rng.random_range(0u8..3)) << (2 * j);
            }
            *q = v;
        }
    }
    Q2Host {
        rows: r,
        cols: c,
        blocks,
    }
}

/// Random Q4_K blocks `[r, c]` (`c` a multiple of 256): d, dmin ~ 1/(sqrt(c)·16·32), random
/// 6-bit scales/mins and codes.
pub fn q4k(r: usize, c: usize, rng: &mut impl RngCore) -> Q4kHost {
    let mut blocks = vec![0u8; r * c / 256 * 144];
    rng.fill_bytes(&mut blocks);
    let d = half::f16::from_f32(1.0 / ((c as f32).sqrt() * 16.0 * 32.0))
        .to_bits()
        .to_le_bytes();
    for b in blocks.chunks_exact_mut(144) {
        b[0..2].copy_from_slice(&d);
        b[2..4].copy_from_slice(&d);
    }
    Q4kHost {
        rows: r,
        cols: c,
        blocks,
    }
}

/// Random dense bf16 `[r, c]`, uniform in ±1/sqrt(c).
pub fn dense(r: usize, c: usize, rng: &mut impl RngCore) -> DenseWeight {
    let s = 1.0 / (c as f32).sqrt();
    DenseWeight {
        rows: r,
        cols: c,
        data: (0..r * c)
            .map(|_| bf16::from_f32(rng.random_range(-s..s)))
            .collect(),
    }
}

/// Random LoRA adapters of `rank` for an `h × i` layer with alpha = 2·rank (scale 2): `A`
/// uniform in ±1/sqrt(in) (as [`dense`]), `B` uniform in ±0.5/sqrt(rank), so a projection's delta
/// has about a third of the magnitude of N(0, 1) activations — large enough that a lost or wrong
/// delta shows in any comparison.
pub fn lora(h: usize, i: usize, rank: usize, rng: &mut impl RngCore) -> LoraFfnWeights {
    let s = 0.5 / (rank as f32).sqrt();
    let mut proj = |out: usize, inp: usize| LoraProjection {
        a: dense(rank, inp, rng),
        b: DenseWeight {
            rows: out,
            cols: rank,
            data: (0..out * rank)
                .map(|_| bf16::from_f32(rng.random_range(-s..s)))
                .collect(),
        },
    };
    LoraFfnWeights {
        rank,
        alpha: 2.0 * rank as f32,
        gate: proj(i, h),
        up: proj(i, h),
        down: proj(h, i),
    }
}
