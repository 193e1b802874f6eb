//! Decode `forward()` on the H200 beside its anchors, measured in the same run:
//! device-to-device copy bandwidth and a cuBLAS bf16 FFN (gate+up as one GEMM, then down; the
//! activation between them is left out of the anchor, <1% of its bytes).
//!
//! Timing: GPU events around `iters` back-to-back calls on one stream (criterion `iter_custom`).
//! `forward()` is also replayed from a CUDA graph captured from one call (on a created stream),
//! so the host's launch overhead shows as the difference.
//! A summary table (µs, graph-replayed µs, effective weight GB/s, ratio to cuBLAS) goes to stdout and to
//! `$DENSEFFN_BENCH_OUT` (default `target/bench-decode.md`). Without a GPU it says so and exits.
mod common;
use common::*;
use criterion::{criterion_group, criterion_main, Criterion};
use denseffn::backend::{Graph, Stream};
use denseffn::bench::synth;
use denseffn::layer::ForwardContext;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::time::Duration;

const SHAPES: &[(&str, usize, usize)] = &[
    ("llama3-8b", 4096, 14336),
    ("qwen3-32b", 5120, 25600),
    ("llama3-70b", 8192, 28672),
];

fn bench(c: &mut Criterion) {
    let Some((gpu, cublas)) = setup("decode") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(1);
    let mut rows = Vec::new();
    let mut km_rows = Vec::new();

    // The copy ceiling of this card, same run: 1 GiB device to device (read + write counted).
    let copy_gbs = copy_gbs(&gpu);
    let stream = Stream::new(&gpu).unwrap();
    let s = stream.raw();

    let mut group = c.benchmark_group("decode");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for &(name, h, i) in SHAPES {
        let layer = random_layer(&gpu, h, i, &mut rng);
        let mut ctx = ForwardContext::new(&layer, 8).unwrap();
        let x = synth::activations(&gpu, 8 * h, &mut rng).unwrap();
        group.bench_function(format!("nvfp4_forward/{name}"), |b| {
            b.iter_custom(|iters| {
                gpu_time(&*gpu, iters, || {
                    layer.forward(x.ptr(), &mut ctx, 0).unwrap();
                })
            })
        });
        let ours = median_us(&*gpu, 11, 50, || {
            layer.forward(x.ptr(), &mut ctx, 0).unwrap();
        });
        let (graph, _) = Graph::capture(&gpu, s, || layer.forward(x.ptr(), &mut ctx, s)).unwrap();
        let graphed = median_us_on(&*gpu, s, 11, 50, || graph.launch(s).unwrap());
        drop(graph);
        let bytes = layer.weights().decode_bytes();
        let mut km1 = 0.0;
        for m in 1..=8usize {
            let t = median_us(&*gpu, 11, 50, || {
                layer.forward_km(x.ptr(), m, &mut ctx, 0).unwrap();
            });
            if m == 1 {
                km1 = t;
            }
            let k = match m {
                2 => format!(
                    "{:.1}",
                    median_us(&*gpu, 11, 50, || {
                        layer.forward_k2(x.ptr(), &mut ctx, 0).unwrap();
                    })
                ),
                3 => format!(
                    "{:.1}",
                    median_us(&*gpu, 11, 50, || {
                        layer.forward_k3(x.ptr(), &mut ctx, 0).unwrap();
                    })
                ),
                _ => "–".into(),
            };
            km_rows.push(format!(
                "| {name} | {m} | {t:.1} | {:.2} | {:.2} | {k} | {:.0} |",
                t / km1,
                t / ours,
                bytes as f64 / t / 1e3
            ));
        }
        drop(layer);

        let ffn = CublasFfn::new(&gpu, h, i, 1, &mut rng).unwrap();
        let anchor = || ffn.run(&cublas, 1).unwrap();
        group.bench_function(format!("cublas_bf16_ffn/{name}"), |b| {
            b.iter_custom(|iters| gpu_time(&*gpu, iters, anchor))
        });
        let theirs = median_us(&*gpu, 11, 50, anchor);
        let bf16_bytes = ffn.weight_bytes();
        rows.push(format!(
            "| {name} | {h}×{i} | {ours:.1} | {graphed:.1} | {:.0} | {:.2} | {theirs:.1} | {:.0} | {:.2}× |",
            bytes as f64 / ours / 1e3,
            bytes as f64 / ours / 1e3 / copy_gbs,
            bf16_bytes as f64 / theirs / 1e3,
            theirs / ours
        ));
    }
    group.finish();
    drop(cublas);

    let mut md = format!(
        "Device: {} ({} SMs). Copy (device to device, read+write): {copy_gbs:.0} GB/s.\n\n\
         | model | hidden×inter | NVFP4 forward µs | graph-replayed µs | NVFP4 GB/s | ÷ copy | cuBLAS bf16 FFN µs | cuBLAS GB/s | speed-up vs cuBLAS |\n|---|---|---|---|---|---|---|---|---|\n",
        gpu.device_name(),
        gpu.sm_count()
    );
    for r in &rows {
        md.push_str(r);
        md.push('\n');
    }
    md.push_str(
        "\nSpeculative verify: forward_km(m) (4 launches) and forward_k2/k3 (3 launches); time(m) ÷ time(1) = forward_km(m) ÷ forward_km(1), and ÷ forward() (one token, 2 launches).\n\n\
         | model | m | forward_km µs | ÷ forward_km(1) | ÷ forward() | forward_k2/k3 µs | NVFP4 GB/s |\n|---|---|---|---|---|---|---|\n",
    );
    for r in &km_rows {
        md.push_str(r);
        md.push('\n');
    }
    println!("\n{md}");
    let path =
        std::env::var("DENSEFFN_BENCH_OUT").unwrap_or_else(|_| "target/bench-decode.md".into());
    if let Err(e) = std::fs::write(&path, &md) {
        println!("could not write {path}: {e}");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
