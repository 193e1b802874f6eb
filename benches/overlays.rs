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
use denseffn::bench::synth::{dense, fp8, q2, q4k};
use denseffn::layer::{ForwardContext, OverlayKind};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::time::Duration;

const SHAPES: &[(&str, usize, usize)] = &[("llama3-8b", 4096, 14336), ("llama3-70b", 8192, 28672)];
const NS: &[usize] = &[512, 4096];

fn bench(c: &mut Criterion) {
    let Some((gpu, cublas)) = setup("overlays") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(3);
    let copy_gbs = copy_gbs(&gpu);

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
        let ffn = CublasFfn::new(&gpu, h, i, nmax, &mut rng).unwrap();
        let (ffn, cb) = (&ffn, &cublas);
        let anchor = |t: usize| move || ffn.run(cb, t).unwrap();
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
