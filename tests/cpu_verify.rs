//! Speculative-verify paths (forward_k2, forward_k3, forward_km) on the CPU reference backend.
mod common;
use common::*;
use denseffn::backend::{CpuBackend, GpuBackend};
use denseffn::layer::{kernels, FfnActivation, ForwardContext};
use denseffn::reference::rel_l2;
use denseffn::Error;
use std::sync::Arc;

const H: usize = 192;
const I: usize = 320;

fn cpu() -> Arc<dyn GpuBackend> {
    Arc::new(CpuBackend::new())
}

#[test]
fn km_matches_reference_and_single_rows_for_every_m() {
    let host = HostLayer::quantized(H, I, 17);
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let gpu = cpu();
        let layer = host.layer(&gpu, act);
        let mut ctx = ForwardContext::new(&layer, 8).unwrap();
        let x = activations(8 * H, 23);
        let want = host.reference(&x, act);
        for m in 1..=8 {
            assert!(layer.can_forward_km(m));
            let xs = upload_bf16(&gpu, &x[..m * H]);
            let before = gpu.launch_count();
            let got = download_bf16(&gpu, layer.forward_km(xs, m, &mut ctx, 0).unwrap(), m * H);
            assert_eq!(gpu.launch_count() - before, 4, "{act:?} m={m}");
            let err = rel_l2(&got, &want[..m * H]);
            assert!(err < 1e-2, "{act:?} m={m}: rel L2 {err}");
            for t in 0..m {
                let single = download_bf16(
                    &gpu,
                    layer
                        .forward(upload_bf16(&gpu, &x[t * H..(t + 1) * H]), &mut ctx, 0)
                        .unwrap(),
                    H,
                );
                let e = rel_l2(&got[t * H..(t + 1) * H], &single);
                assert!(
                    e < 5e-3,
                    "{act:?} m={m} row {t}: differs from forward by {e}"
                );
            }
        }
    }
}

/// Inputs and intermediates whose magnitude changes every 64 columns (2^-4..2^4): the packed
/// activations carry one scale per token and K split, so up (reading gate's staged copy) and
/// down (reading the packer's output) must each apply the scale of the split the values came
/// from. Every verify path against the f64 reference.
#[test]
fn verify_paths_track_magnitudes_that_change_along_k() {
    let host = HostLayer::quantized_graded(H, I, 31);
    let x = graded_activations(8 * H, H, 32);
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let gpu = cpu();
        let layer = host.layer(&gpu, act);
        let mut ctx = ForwardContext::new(&layer, 8).unwrap();
        let want = host.reference(&x, act);
        for &(path, m) in GRADED_PATHS {
            let got = path_output(&layer, &gpu, path, m, &x, &mut ctx).unwrap();
            let err = rel_l2(&got, &want[..m * H]);
            assert!(err < 1e-2, "{act:?} {path} m={m}: rel L2 {err}");
        }
    }
}

#[test]
fn k2_k3_match_reference_with_three_launches() {
    let host = HostLayer::quantized(H, I, 19);
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let gpu = cpu();
        let layer = host.layer(&gpu, act);
        let mut ctx = ForwardContext::new(&layer, 3).unwrap();
        let x = activations(3 * H, 29);
        let want = host.reference(&x, act);
        for k in [2usize, 3] {
            let xs = upload_bf16(&gpu, &x[..k * H]);
            let before = gpu.launch_count();
            let y = if k == 2 {
                layer.forward_k2(xs, &mut ctx, 0)
            } else {
                layer.forward_k3(xs, &mut ctx, 0)
            }
            .unwrap();
            assert_eq!(gpu.launch_count() - before, 3, "{act:?} k{k}");
            let got = download_bf16(&gpu, y, k * H);
            let km = download_bf16(&gpu, layer.forward_km(xs, k, &mut ctx, 0).unwrap(), k * H);
            // forward_km's up and down read the activations packed as f16 (a power-of-two
            // scale per token and K split), k2/k3 stage them exactly here: the two agree to
            // within that rounding (2^-11 relative per value).
            let d = rel_l2(&km, &got);
            assert!(d < 2e-3, "{act:?} k{k}: forward_km({k}) differs by {d}");
            let err = rel_l2(&got, &want[..k * H]);
            assert!(err < 1e-2, "{act:?} k{k}: {err}");
        }
        assert_eq!(
            layer.verify_kernels(2)[1],
            if act == FfnActivation::Silu {
                kernels::SILU_MUL_PACK
            } else {
                kernels::GELU_MUL_PACK
            }
        );
    }
}

#[test]
fn km_refuses_bad_m_and_missing_kernels() {
    let host = HostLayer::quantized(H, I, 3);
    let gpu = cpu();
    let layer = host.layer(&gpu, FfnActivation::Silu);
    let mut ctx = ForwardContext::new(&layer, 8).unwrap();
    let x = upload_bf16(&gpu, &activations(8 * H, 1));
    for m in [0usize, 9, 100] {
        assert!(!layer.can_forward_km(m));
        assert!(
            matches!(layer.forward_km(x, m, &mut ctx, 0), Err(Error::Invalid(_))),
            "m={m}"
        );
    }
    // Input shorter than m rows.
    let short = upload_bf16(&gpu, &activations(2 * H, 1));
    assert!(matches!(
        layer.forward_km(short, 3, &mut ctx, 0),
        Err(Error::Invalid(_))
    ));

    // Without the batch8 kernel: m ≤ 4 still works, m = 5..8 is refused by name, nothing launches.
    let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new().without_kernels(&[kernels::BATCH8]));
    let layer = host.layer(&gpu, FfnActivation::Silu);
    let mut ctx = ForwardContext::new(&layer, 8).unwrap();
    let x = upload_bf16(&gpu, &activations(8 * H, 1));
    assert!(layer.can_forward_km(4) && !layer.can_forward_km(5));
    let before = gpu.launch_count();
    match layer.forward_km(x, 6, &mut ctx, 0) {
        Err(Error::MissingKernel(k)) => assert_eq!(k, kernels::BATCH8),
        other => panic!("expected MissingKernel, got {:?}", other.map(|_| ())),
    }
    assert_eq!(gpu.launch_count(), before);
    layer.forward_km(x, 4, &mut ctx, 0).unwrap();

    let gpu: Arc<dyn GpuBackend> =
        Arc::new(CpuBackend::new().without_kernels(&[kernels::BATCH3_DOWN]));
    let layer = host.layer(&gpu, FfnActivation::Gelu);
    let mut ctx = ForwardContext::new(&layer, 3).unwrap();
    let x = upload_bf16(&gpu, &activations(3 * H, 1));
    assert!(layer.forward_k2(x, &mut ctx, 0).is_ok());
    assert!(
        matches!(layer.forward_k3(x, &mut ctx, 0), Err(Error::MissingKernel(ref k)) if k == kernels::BATCH3_DOWN)
    );
}

/// Every decode and verify path plans its GEMVs from the kernels' occupancy (resident blocks
/// per SM); the CPU reference checks each launch's schedule as the GPU kernel relies on it
/// (grid, K coverage, shared memory, split-K scratch inside the context's buffers). For every
/// occupancy 1..=8 on a shape whose plans differ with it, every path runs, matches the f64
/// reference, and gives the same bits as at the default occupancy.
#[test]
fn every_occupancy_plans_within_the_context_scratch() {
    let (h, i) = (1024, 2048);
    let host = HostLayer::quantized(h, i, 41);
    let x = activations(8 * h, 43);
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let want = host.reference(&x, act);
        let outputs = |resident: u32| -> Vec<Vec<f64>> {
            let gpu: Arc<dyn GpuBackend> =
                Arc::new(CpuBackend::new().with_resident_blocks(resident));
            let layer = host.layer(&gpu, act);
            let mut ctx = ForwardContext::new(&layer, 8).unwrap();
            let mut outs = Vec::new();
            let one = upload_bf16(&gpu, &x[..h]);
            outs.push(download_bf16(
                &gpu,
                layer.forward(one, &mut ctx, 0).unwrap(),
                h,
            ));
            let xs = upload_bf16(&gpu, &x);
            let y = layer.forward_k2(xs, &mut ctx, 0).unwrap();
            outs.push(download_bf16(&gpu, y, 2 * h));
            let y = layer.forward_k3(xs, &mut ctx, 0).unwrap();
            outs.push(download_bf16(&gpu, y, 3 * h));
            for m in 1..=8 {
                let y = layer.forward_km(xs, m, &mut ctx, 0);
                let y = y.unwrap_or_else(|e| panic!("{act:?} resident {resident} m={m}: {e}"));
                outs.push(download_bf16(&gpu, y, m * h));
            }
            outs
        };
        let base = outputs(4);
        for (j, out) in base.iter().enumerate() {
            let err = rel_l2(out, &want[..out.len()]);
            assert!(err < 1e-2, "{act:?} output {j}: rel L2 {err}");
        }
        for resident in [1, 2, 8] {
            assert_eq!(outputs(resident), base, "{act:?} resident {resident}");
        }
    }
}

/// The schedule check itself: a GEMV whose split-K workspace does not fit its buffer, or
/// whose splits skip columns, is refused with a clear error instead of being computed.
#[test]
fn gemv_schedules_that_would_overrun_are_refused() {
    use denseffn::backend::Launch;
    use denseffn_device::params::{gemv_smem_bytes, GemvParams, ParamBlock};
    let gpu = CpuBackend::new();
    let (n, k, m) = (256u32, 512u32, 2u32);
    let alloc = |bytes: usize| gpu.alloc(bytes).unwrap().0;
    let mut p = GemvParams {
        w0: alloc((n * k / 2) as usize),
        s0: alloc((n * k / 16) as usize),
        act0: alloc((m * k * 2) as usize),
        out0: alloc((m * n * 2) as usize),
        n,
        k,
        m,
        out_bf16: 1,
        splits: 2,
        chunks_per_split: 4,
        ws: alloc((2 * 2 * m * n * 4) as usize - 4), // one f32 short
        counters: alloc(2 * 4),
        ..Default::default()
    };
    let launch = |p: &GemvParams| {
        let l = Launch {
            kernel: "gemv_batchm_nvfp4",
            grid: (2, p.splits, 1),
            block: (256, 1, 1),
            smem: gemv_smem_bytes(m, p.chunks_per_split),
            params: p.as_bytes(),
        };
        gpu.launch(&l, 0)
    };
    let e = launch(&p).unwrap_err();
    assert!(matches!(e, Error::BadAccess(_)), "{e}");
    p.ws = alloc((2 * 2 * m * n * 4) as usize);
    launch(&p).unwrap();
    p.chunks_per_split = 3; // 2 × 3 < 8 chunks
    let e = launch(&p).unwrap_err();
    assert!(e.to_string().contains("do not cover"), "{e}");
}
