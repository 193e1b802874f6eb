//! The Q2_0, Q4_K, FP8 and BF16 overlays on the H200 beside their anchors, measured in the same run:
//! device-to-device copy bandwidth, and a cuBLAS bf16 FFN per shape (decode: one token; prefill:
//! N = 512 and 4096).
//!
//! Decode figures are effective weight bandwidth: the bytes the overlay keeps on the device for
//! gate, up and down (read once per call) ÷ time. Prefill figures are 6·h·i·N flops ÷ time.
//! Timing: GPU events around back-to-back calls on one stream. The table goes to stdout and to
//! `$DENSEFFN_BENCH_OUT` (default `target/bench-overlays.md`). Without a GPU it says so.
mod common;
use common::*;
use criterion::{criterion_group, criterion_main, Criterion};
use denseffn::buffer::DeviceBuffer;
use denseffn::layer::{DenseWeight, ForwardContext, OverlayKind};
use denseffn::pack_fp8::Fp8Host;
use denseffn::pack_q2::Q2Host;
use denseffn::pack_q4k::Q4kHost;
use half::bf16;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use std::time::Duration;

const SHAPES: &[(&str, usize, usize)] = &[("llama3-8b", 4096, 14336), ("llama3-70b", 8192, 28672)];
const NS: &[usize] = &[512, 4096];

/// Random E4M3 codes (no NaN) with block scales keeping activations O(1).
fn fp8(r: usize, c: usize, rng: &mut SmallRng) -> Fp8Host {
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

/// Random ternary blocks with d ~ 1/sqrt(c).
fn q2(r: usize, c: usize, rng: &mut SmallRng) -> Q2Host {
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

/// Random Q4_K blocks: d, dmin ~ 1/(sqrt(c)·16·32), random 6-bit scales/mins and codes.
fn q4k(r: usize, c: usize, rng: &mut SmallRng) -> Q4kHost {
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

fn dense(r: usize, c: usize, rng: &mut SmallRng) -> DenseWeight {
    let s = 1.0 / (c as f32).sqrt();
    DenseWeight {
        rows: r,
        cols: c,
        data: (0..r * c)
            .map(|_| bf16::from_f32(rng.random_range(-s..s)))
            .collect(),
    }
}

fn bench(c: &mut Criterion) {
    let Some((gpu, cublas)) = setup("overlays") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(3);
    let n = 1usize << 30;
    let (src, dst) = (
        DeviceBuffer::zeroed(&gpu, n).unwrap(),
        DeviceBuffer::zeroed(&gpu, n).unwrap(),
    );
    let copy_gbs = 2.0 * n as f64
        / median_us(&*gpu, 5, 10, || {
            gpu.copy_async(dst.ptr(), src.ptr(), n, 0).unwrap()
        })
        / 1e3;
    drop((src, dst));

    let mut group = c.benchmark_group("overlays");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(1));
    let mut decode_rows = Vec::new();
    let mut prefill_rows = Vec::new();
    let nmax = *NS.iter().max().unwrap();
    for &(name, h, i) in SHAPES {
        let x = random_bf16(&gpu, nmax * h, &mut rng);
        // cuBLAS bf16 anchors for this shape.
        let wgu = random_bf16(&gpu, 2 * i * h, &mut rng);
        let wd = random_bf16(&gpu, h * i, &mut rng);
        let gu = random_bf16(&gpu, nmax * 2 * i, &mut rng);
        let y = random_bf16(&gpu, nmax * h, &mut rng);
        let (pwgu, pwd, px, pgu, py, cb) =
            (wgu.ptr(), wd.ptr(), x.ptr(), gu.ptr(), y.ptr(), &cublas);
        let anchor = |t: usize| {
            move || {
                cb.gemm(pwgu, px, pgu, 2 * i, h, t);
                cb.gemm(pwd, pgu, py, h, i, t);
            }
        };
        let cublas_decode = median_us(&*gpu, 11, 50, anchor(1));
        let cublas_prefill: Vec<f64> = NS
            .iter()
            .map(|&t| median_us(&*gpu, 5, 3, anchor(t)))
            .collect();
        for kind in [
            OverlayKind::Q2,
            OverlayKind::Q4k,
            OverlayKind::Fp8,
            OverlayKind::Bf16,
        ] {
            let mut layer = random_layer(&gpu, h, i, &mut rng);
            match kind {
                OverlayKind::Q2 => layer.set_q2_weights(
                    &q2(i, h, &mut rng),
                    &q2(i, h, &mut rng),
                    &q2(h, i, &mut rng),
                ),
                OverlayKind::Q4k => layer.set_q4k_weights(
                    &q4k(i, h, &mut rng),
                    &q4k(i, h, &mut rng),
                    &q4k(h, i, &mut rng),
                ),
                OverlayKind::Fp8 => layer.set_fp8_weights(
                    &fp8(i, h, &mut rng),
                    &fp8(i, h, &mut rng),
                    &fp8(h, i, &mut rng),
                ),
                OverlayKind::Bf16 => layer.set_bf16_weights(
                    &dense(i, h, &mut rng),
                    &dense(i, h, &mut rng),
                    &dense(h, i, &mut rng),
                ),
            }
            .unwrap();
            let mut ctx = ForwardContext::new(&layer, nmax).unwrap();
            let bytes = layer.footprint().overlays as f64;
            group.bench_function(format!("{}_forward/{name}", kind.name()), |b| {
                b.iter_custom(|iters| {
                    gpu_time(&*gpu, iters, || {
                        layer.forward(x.ptr(), &mut ctx, 0).unwrap();
                    })
                })
            });
            let t1 = median_us(&*gpu, 11, 50, || {
                layer.forward(x.ptr(), &mut ctx, 0).unwrap();
            });
            let km: Vec<f64> = (1..=8)
                .map(|m| {
                    median_us(&*gpu, 7, 20, || {
                        layer.forward_km(x.ptr(), m, &mut ctx, 0).unwrap();
                    })
                })
                .collect();
            let ratios: Vec<String> = km.iter().map(|t| format!("{:.2}", t / t1)).collect();
            decode_rows.push(format!(
                "| {} | {name} | {t1:.1} | {:.0} | {:.2} | {} | {cublas_decode:.1} | {:.2}× |",
                kind.name(),
                bytes / t1 / 1e3,
                bytes / t1 / 1e3 / copy_gbs,
                ratios.join(" / "),
                cublas_decode / t1
            ));
            for (&t, &theirs) in NS.iter().zip(&cublas_prefill) {
                let ours = median_us(&*gpu, 5, 3, || {
                    layer.forward_prefill(x.ptr(), t, &mut ctx, 0).unwrap();
                });
                let flop = 6.0 * (h * i * t) as f64;
                prefill_rows.push(format!(
                    "| {} | {name} | {t} | {ours:.0} | {:.0} | {:.0} | {:.2} |",
                    kind.name(),
                    flop / ours / 1e6,
                    flop / theirs / 1e6,
                    theirs / ours
                ));
            }
        }
    }
    group.finish();
    drop(cublas);
    let mut md = format!(
        "Device: {} ({} SMs). Copy (device to device, read+write): {copy_gbs:.0} GB/s.\n\n\
         Decode (SiLU): forward() one token; km ratios = forward_km(m) ÷ forward() for m = 1..8.\n\n\
         | overlay | model | forward µs | GB/s | ÷ copy | km(m)/forward m=1..8 | cuBLAS bf16 µs | cuBLAS ÷ ours |\n|---|---|---|---|---|---|---|---|\n",
        gpu.device_name(),
        gpu.sm_count()
    );
    for r in &decode_rows {
        md.push_str(r);
        md.push('\n');
    }
    md.push_str("\nPrefill (SiLU): forward_prefill.\n\n| overlay | model | N | µs | TFLOP/s | cuBLAS TFLOP/s | ours ÷ cuBLAS |\n|---|---|---|---|---|---|---|\n");
    for r in &prefill_rows {
        md.push_str(r);
        md.push('\n');
    }
    println!("\n{md}");
    let path =
        std::env::var("DENSEFFN_BENCH_OUT").unwrap_or_else(|_| "target/bench-overlays.md".into());
    if let Err(e) = std::fs::write(&path, &md) {
        println!("could not write {path}: {e}");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
