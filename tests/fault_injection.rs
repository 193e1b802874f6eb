//! Every allocation of every load-time step fails once (CpuBackend fault injection): the step
//! reports out-of-memory, leaves nothing allocated, and what existed before still works.
mod common;
use common::*;
use denseffn::backend::{CpuBackend, GpuBackend};
use denseffn::layer::{DenseFfnLayer, DenseFfnWeights, FfnActivation, ForwardContext};
use denseffn::Error;
use std::sync::Arc;

const H: usize = 128;
const I: usize = 256;

/// Allocations a full load makes: weights upload, then one ForwardContext.
fn allocations_of_a_load(host: &HostLayer) -> (u64, u64) {
    let cpu = Arc::new(CpuBackend::new());
    let gpu: Arc<dyn GpuBackend> = cpu.clone();
    let w = DenseFfnWeights::upload(&gpu, &host.gate, &host.up, &host.down).unwrap();
    let upload = cpu.allocations_attempted();
    let layer = DenseFfnLayer::new(w, gpu.clone()).unwrap();
    let _ctx = ForwardContext::new(&layer, 8).unwrap();
    (upload, cpu.allocations_attempted())
}

#[test]
fn every_load_time_allocation_failing_once_is_clean() {
    let host = HostLayer::quantized(H, I, 41);
    let (upload, total) = allocations_of_a_load(&host);
    assert!(
        upload >= 12 && total > upload,
        "upload {upload}, total {total}"
    );
    let x = activations(8 * H, 3);
    let want = {
        let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
        let layer = host.layer(&gpu, FfnActivation::Silu);
        let mut ctx = ForwardContext::new(&layer, 8).unwrap();
        download_bf16(
            &gpu,
            layer
                .forward_prefill(upload_bf16(&gpu, &x), 8, &mut ctx, 0)
                .unwrap(),
            8 * H,
        )
    };
    for n in 0..total {
        let cpu = Arc::new(CpuBackend::new().failing_allocation(n));
        let gpu: Arc<dyn GpuBackend> = cpu.clone();
        match DenseFfnWeights::upload(&gpu, &host.gate, &host.up, &host.down) {
            Err(e) => {
                assert!(
                    n < upload,
                    "allocation {n}: upload failed past its allocations: {e}"
                );
                assert!(
                    matches!(e, Error::OutOfMemory { .. }),
                    "allocation {n}: {e}"
                );
                assert_eq!(
                    (cpu.used_bytes(), cpu.live_allocations()),
                    (0, 0),
                    "allocation {n}: upload leaked"
                );
            }
            Ok(w) => {
                assert!(n >= upload);
                let layer = DenseFfnLayer::new(w, gpu.clone()).unwrap();
                let held = cpu.used_bytes();
                let e = ForwardContext::new(&layer, 8)
                    .err()
                    .expect("the context's allocation must fail");
                assert!(
                    matches!(e, Error::OutOfMemory { .. }),
                    "allocation {n}: {e}"
                );
                assert_eq!(
                    cpu.used_bytes(),
                    held,
                    "allocation {n}: context creation leaked"
                );
                // The layer is as it was: a new context works and gives the same result.
                let mut ctx = ForwardContext::new(&layer, 8).unwrap();
                let got = download_bf16(
                    &gpu,
                    layer
                        .forward_prefill(upload_bf16(&gpu, &x), 8, &mut ctx, 0)
                        .unwrap(),
                    8 * H,
                );
                assert_eq!(
                    got, want,
                    "allocation {n}: results changed after a failed step"
                );
            }
        }
    }
}

/// Runs one path; `Ok(())` or its error.
fn run_path(layer: &DenseFfnLayer, gpu: &Arc<dyn GpuBackend>, path: &str) -> Result<(), Error> {
    let mut ctx = ForwardContext::new(layer, 8)?;
    let x = upload_bf16(gpu, &activations(8 * H, 5));
    match path {
        "forward" => layer.forward(x, &mut ctx, 0).map(drop),
        "forward_k2" => layer.forward_k2(x, &mut ctx, 0).map(drop),
        "forward_k3" => layer.forward_k3(x, &mut ctx, 0).map(drop),
        "forward_prefill" => layer.forward_prefill(x, 8, &mut ctx, 0).map(drop),
        km => layer
            .forward_km(
                x,
                km.trim_start_matches("forward_km").parse().unwrap(),
                &mut ctx,
                0,
            )
            .map(drop),
    }
}

#[test]
fn every_missing_kernel_is_named_by_every_path_that_needs_it() {
    let host = HostLayer::quantized(H, I, 43);
    let mut paths = vec![
        "forward".to_string(),
        "forward_k2".into(),
        "forward_k3".into(),
        "forward_prefill".into(),
    ];
    paths.extend((1..=8).map(|m| format!("forward_km{m}")));
    // The NVFP4, elementwise and LoRA kernels; the overlays' own are covered by
    // tests/cpu_overlays.rs, the Q4_K MMQ arm's (quantize, mmq, requant; off by default) by
    // tests/cpu_q4k_mmq.rs, the W4A4 arm's own (quantize, gate+up; off by default) by
    // tests/cpu_nvfp4_mmq.rs, the FP8 arms' (quantizers included) by tests/cpu_overlays.rs; the
    // `_splitk` GEMMs are optional.
    let mmq = denseffn::layer::PrefillArm::Q4kMmq.kernels();
    let w4a4 = [
        denseffn::layer::nvfp4_mmq_kernels::QUANTIZE,
        denseffn::layer::nvfp4_mmq_kernels::GATE_UP,
    ];
    let nvfp4_layer_kernels = CpuBackend::kernels()
        .iter()
        .filter(|k| k.contains("nvfp4") || !k.contains("gem"))
        .filter(|k| !mmq.contains(k) && **k != denseffn::layer::mmq_kernels::REQUANT)
        .filter(|k| !w4a4.contains(k))
        .filter(|k| !denseffn::layer::w8a8_kernels::ALL.contains(k))
        .filter(|k| !denseffn::layer::w8a16_kernels::ALL.contains(k))
        // Optional: without a `_splitk` variant the plain GEMM runs over all of K
        // (tests/cpu_prefill.rs checks that fallback).
        .filter(|k| !k.ends_with("_splitk"));
    for &kernel in nvfp4_layer_kernels {
        let mut needed_by = 0;
        // Each activation, without and with LoRA deltas (which add `lora_shrink`).
        for (act, lora) in [
            (FfnActivation::Silu, false),
            (FfnActivation::Gelu, false),
            (FfnActivation::Silu, true),
            (FfnActivation::Gelu, true),
        ] {
            let cpu = Arc::new(CpuBackend::new().without_kernels(&[kernel]));
            let gpu: Arc<dyn GpuBackend> = cpu.clone();
            let mut layer = host.layer(&gpu, act);
            if lora {
                layer.set_lora_weights(lora_weights(H, I, 16, 44)).unwrap();
            }
            for path in &paths {
                let before = gpu.launch_count();
                match run_path(&layer, &gpu, path) {
                    Ok(()) => {}
                    Err(Error::MissingKernel(k)) => {
                        assert_eq!(k, kernel, "{path} {act:?} lora={lora}: wrong kernel named");
                        assert_eq!(
                            gpu.launch_count(),
                            before,
                            "{path} {act:?} lora={lora}: launched before failing"
                        );
                        needed_by += 1;
                    }
                    Err(e) => panic!("{path} {act:?} lora={lora} without {kernel}: {e}"),
                }
            }
        }
        assert!(
            needed_by > 0,
            "no path needs {kernel}: dead kernel or missing check"
        );
    }
}

/// Every allocation of `set_lora_weights` failing once, on a layer without LoRA and on one with
/// an earlier LoRA: out of memory, nothing leaked, and the layer exactly as it was (same LoRA,
/// footprint and results on every path).
#[test]
fn every_lora_install_allocation_failing_once_is_clean() {
    let host = HostLayer::random(H, I, 45);
    let (first, second) = (lora_weights(H, I, 8, 46), lora_weights(H, I, 24, 47));
    let x = activations(8 * H, 48);
    let paths = [("forward", 1), ("k2", 2), ("km", 8), ("prefill", 8)];
    let results = |layer: &DenseFfnLayer, gpu: &Arc<dyn GpuBackend>| -> Vec<Vec<f64>> {
        let mut ctx = ForwardContext::new(layer, 8).unwrap();
        paths
            .iter()
            .map(|&(p, m)| path_output(layer, gpu, p, m, &x, &mut ctx).unwrap())
            .collect()
    };
    let allocs = {
        let cpu = Arc::new(CpuBackend::new());
        let gpu: Arc<dyn GpuBackend> = cpu.clone();
        let mut layer = host.layer(&gpu, FfnActivation::Silu);
        let before = cpu.allocations_attempted();
        layer.set_lora_weights(second.clone()).unwrap();
        cpu.allocations_attempted() - before
    };
    assert_eq!(allocs, 6, "A and B of gate, up, down");
    for earlier in [None, Some(&first)] {
        for fail in 0..allocs {
            let cpu = Arc::new(CpuBackend::new());
            let gpu: Arc<dyn GpuBackend> = cpu.clone();
            let mut layer = host.layer(&gpu, FfnActivation::Silu);
            if let Some(w) = earlier {
                layer.set_lora_weights(w.clone()).unwrap();
            }
            let want = results(&layer, &gpu);
            let (foot, used, live) = (layer.footprint(), cpu.used_bytes(), cpu.live_allocations());
            cpu.fail_allocation_at(cpu.allocations_attempted() + fail);
            let e = layer.set_lora_weights(second.clone()).unwrap_err();
            assert!(matches!(e, Error::OutOfMemory { .. }), "alloc {fail}: {e}");
            assert_eq!(layer.lora_rank(), earlier.map(|w| w.rank));
            assert_eq!(layer.footprint(), foot, "alloc {fail}");
            assert_eq!(
                (cpu.used_bytes(), cpu.live_allocations()),
                (used, live),
                "alloc {fail}: leaked"
            );
            assert_eq!(results(&layer, &gpu), want, "alloc {fail}: results changed");
        }
    }
}
