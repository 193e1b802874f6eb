//! LoRA overhead on the H200: NVFP4 decode with LoRA deltas of rank 16 and 64 against the same
//! layer without, measured in the same run (issue 8's target: ≤ 10% of `forward()` time).
//!
//! Per model shape (SiLU): `forward()` called directly and replayed from a CUDA graph (so the
//! extra launches' host overhead shows as the difference), `forward_km(4)`, `forward_km(8)` and
//! `forward_prefill(512)`, each as µs and as overhead over the plain NVFP4 layer. Timing: GPU
//! events around back-to-back calls on one created stream, median of several repetitions. The
//! table goes to stdout and to `$DENSEFFN_BENCH_OUT` (default `target/bench-lora.md`). Without a
//! GPU it says so and exits.
#[allow(unused_imports)] // the cuBLAS anchor helpers: this bench compares against itself
mod common;
use common::*;
use criterion::{criterion_group, criterion_main, Criterion};
use denseffn::backend::{CudaBackend, GpuBackend, Graph, Stream};
use denseffn::bench::synth;
use denseffn::layer::{DenseFfnLayer, ForwardContext};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::Arc;
use std::time::Duration;

const SHAPES: &[(&str, usize, usize)] = &[("llama3-8b", 4096, 14336), ("llama3-70b", 8192, 28672)];
/// LoRA ranks measured (0: the plain NVFP4 layer, the baseline).
const RANKS: &[usize] = &[0, 16, 64];
const PREFILL_N: usize = 512;

/// µs of forward, graph-replayed forward, km(4), km(8), prefill(512) for one layer.
fn times(gpu: &Arc<dyn GpuBackend>, layer: &DenseFfnLayer, s: u64, x: u64) -> [f64; 5] {
    let x = denseffn::backend::DevicePtr(x);
    let mut ctx = ForwardContext::new(layer, PREFILL_N).unwrap();
    let mut t = |f: &mut dyn FnMut(&mut ForwardContext)| {
        f(&mut ctx);
        median_us_on(&**gpu, s, 11, 50, || f(&mut ctx))
    };
    let forward = t(&mut |c| {
        layer.forward(x, c, s).unwrap();
    });
    let km4 = t(&mut |c| {
        layer.forward_km(x, 4, c, s).unwrap();
    });
    let km8 = t(&mut |c| {
        layer.forward_km(x, 8, c, s).unwrap();
    });
    let prefill = median_us_on(&**gpu, s, 5, 5, || {
        layer.forward_prefill(x, PREFILL_N, &mut ctx, s).unwrap();
    });
    let (graph, _) = Graph::capture(gpu, s, || layer.forward(x, &mut ctx, s)).unwrap();
    graph.launch(s).unwrap();
    let graphed = median_us_on(&**gpu, s, 11, 50, || graph.launch(s).unwrap());
    [forward, graphed, km4, km8, prefill]
}

fn bench(c: &mut Criterion) {
    let gpu: Arc<dyn GpuBackend> = match CudaBackend::new() {
        Ok(g) => Arc::new(g),
        Err(e) => {
            println!("lora bench skipped: {e}");
            return;
        }
    };
    let mut rng = SmallRng::seed_from_u64(8);
    let stream = Stream::new(&gpu).unwrap();
    let s = stream.raw();
    let mut group = c.benchmark_group("lora");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let mut rows = Vec::new();
    for &(name, h, i) in SHAPES {
        let mut layer = random_layer(&gpu, h, i, &mut rng);
        let x = synth::activations(&gpu, PREFILL_N * h, &mut rng).unwrap();
        let mut base = [0.0f64; 5];
        for &rank in RANKS {
            if rank > 0 {
                layer
                    .set_lora_weights(synth::lora(h, i, rank, &mut rng))
                    .unwrap();
            }
            let mut ctx = ForwardContext::new(&layer, 8).unwrap();
            group.bench_function(format!("forward_lora{rank}/{name}"), |b| {
                b.iter_custom(|iters| {
                    gpu_time(&*gpu, iters, || {
                        layer.forward(x.ptr(), &mut ctx, 0).unwrap();
                    })
                })
            });
            let t = times(&gpu, &layer, s, x.ptr().0);
            if rank == 0 {
                base = t;
            }
            let cell = |k: usize| {
                if rank == 0 {
                    format!("{:.1}", t[k])
                } else {
                    format!("{:.1} (+{:.1}%)", t[k], 100.0 * (t[k] / base[k] - 1.0))
                }
            };
            rows.push(format!(
                "| {name} | {} | {} | {} | {} | {} | {} | {:.2} | {} |",
                if rank == 0 {
                    "none".into()
                } else {
                    rank.to_string()
                },
                cell(0),
                cell(1),
                cell(2),
                cell(3),
                cell(4),
                layer.footprint().lora as f64 / 1e6,
                layer.decode_kernels().len()
            ));
        }
    }
    group.finish();
    let mut md = format!(
        "Device: {} ({} SMs). NVFP4 SiLU layer, LoRA alpha = 2·rank; µs per call (overhead over \
         the same layer without LoRA). Target (issue 8): forward overhead ≤ 10% at rank 16 and 64.\n\n\
         | model | LoRA rank | forward µs | graph-replayed forward µs | km(4) µs | km(8) µs | \
         prefill({PREFILL_N}) µs | LoRA MB | forward launches |\n|---|---|---|---|---|---|---|---|---|\n",
        gpu.device_name(),
        gpu.sm_count()
    );
    for r in &rows {
        md.push_str(r);
        md.push('\n');
    }
    println!("\n{md}");
    let path =
        std::env::var("DENSEFFN_BENCH_OUT").unwrap_or_else(|_| "target/bench-lora.md".into());
    if let Err(e) = std::fs::write(&path, &md) {
        println!("could not write {path}: {e}");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
