//! Prefill `forward_prefill` on the H200 beside a cuBLAS bf16 FFN (gate+up one GEMM, then down;
//! activation left out of the anchor) measured in the same run. TFLOP/s counts `2·N·3·h·i`.
//! Three arms per shape: the default `nvfp4_t_m128`, and `q4k_mmq` on the same kind of layer after
//! `finalize_q4k_load` (int8 activations × requantized Q4_K on integer tensor cores; ggml's
//! q4_K MMQ on this H200: 167 TFLOP/s at N = 512), and `nvfp4_mmq` after
//! `finalize_nvfp4_mmq_load` (NVFP4 activations × NVFP4 gate/up on int8 tensor cores, down on
//! the bf16 GEMM; ggml's nvfp4: 134 TFLOP/s at N = 512); and an FP8 overlay (block-scaled E4M3
//! weights) on its two arms: `w8a16_gemm` (bf16 activations) and the opt-in FP8 × FP8
//! `w8a8_gemm` (activations quantized per token to E4M3; ggml's q8_0: 185 TFLOP/s at N = 512).
//! Table to stdout and `$DENSEFFN_BENCH_OUT` (default `target/bench-prefill.md`).
mod common;
use common::*;
use criterion::{criterion_group, criterion_main, Criterion};
use denseffn::layer::{ForwardContext, PrefillConfig};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::time::Duration;

const SHAPES: &[(&str, usize, usize)] = &[("llama3-8b", 4096, 14336), ("llama3-70b", 8192, 28672)];
const NS: &[usize] = &[512, 4096];

fn bench(c: &mut Criterion) {
    let Some((gpu, cublas)) = setup("prefill") else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(2);
    let mut rows = Vec::new();
    let mut group = c.benchmark_group("prefill");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(1));
    for &(name, h, i) in SHAPES {
        let nmax = *NS.iter().max().unwrap();
        let x = random_bf16(&gpu, nmax * h, &mut rng);
        let ffn = CublasFfn::new(&gpu, h, i, nmax, &mut rng).unwrap();
        for arm in 0..5 {
            let mut layer = random_layer(&gpu, h, i, &mut rng);
            if arm == 1 {
                layer.set_prefill_config(PrefillConfig {
                    q4k_mmq: true,
                    nvfp4_mmq: false,
                    w8a8: false,
                });
                layer.finalize_q4k_load(&gpu.clone(), h, i, 0).unwrap();
            } else if arm == 2 {
                layer.set_prefill_config(PrefillConfig {
                    q4k_mmq: false,
                    nvfp4_mmq: true,
                    w8a8: false,
                });
                layer
                    .finalize_nvfp4_mmq_load(&gpu.clone(), h, i, 0)
                    .unwrap();
            } else if arm >= 3 {
                layer.set_prefill_config(PrefillConfig {
                    w8a8: arm == 4,
                    ..PrefillConfig::default()
                });
                let fp8 = denseffn::bench::formats::overlay;
                fp8(
                    &mut layer,
                    &mut rng,
                    denseffn::bench::synth::fp8,
                    denseffn::layer::DenseFfnLayer::set_fp8_weights,
                )
                .unwrap();
            }
            let arm = layer.prefill_arm().unwrap().name();
            let mut ctx = ForwardContext::new(&layer, nmax).unwrap();
            for &n in NS {
                group.bench_function(format!("{arm}/{name}/N={n}"), |b| {
                    b.iter_custom(|iters| {
                        gpu_time(&*gpu, iters, || {
                            layer.forward_prefill(x.ptr(), n, &mut ctx, 0).unwrap();
                        })
                    })
                });
                let ours = median_us(&*gpu, 5, 3, || {
                    layer.forward_prefill(x.ptr(), n, &mut ctx, 0).unwrap();
                });
                let anchor = || ffn.run(&cublas, n).unwrap();
                let theirs = median_us(&*gpu, 5, 3, anchor);
                let flop = 2.0 * n as f64 * 3.0 * h as f64 * i as f64;
                rows.push(format!(
                    "| {name} | {arm} | {n} | {ours:.0} | {:.0} | {theirs:.0} | {:.0} | {:.2} |",
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
        "Device: {}. Prefill forward_prefill (arms nvfp4_t_m128, q4k_mmq after finalize_q4k_load, nvfp4_mmq after finalize_nvfp4_mmq_load, SiLU) vs a cuBLAS bf16 FFN, same run (ggml q4_K MMQ: 167 TFLOP/s at N = 512).\n\n\
         | model | arm | N | µs | TFLOP/s | cuBLAS µs | cuBLAS TFLOP/s | ratio to cuBLAS |\n|---|---|---|---|---|---|---|---|\n",
        gpu.device_name()
    );
    for r in &rows {
        md.push_str(r);
        md.push('\n');
    }
    println!("\n{md}");
    let path =
        std::env::var("DENSEFFN_BENCH_OUT").unwrap_or_else(|_| "target/bench-prefill.md".into());
    if let Err(e) = std::fs::write(&path, &md) {
        println!("could not write {path}: {e}");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
