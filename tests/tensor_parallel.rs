//! Simulated tensor parallelism on the CPU backend: ranks in threads, each a layer over its
//! shard; the sum of their outputs (the all-reduce) equals the unsharded FFN.
mod common;
use common::*;
use denseffn::backend::{CpuBackend, GpuBackend};
use denseffn::layer::{DenseFfnLayer, DenseFfnWeights, FfnActivation, ForwardContext};
use denseffn::reference::rel_l2;
use denseffn::shard::shard_ffn;
use denseffn::Error;
use std::sync::Arc;

#[test]
fn rank_outputs_sum_to_the_unsharded_ffn() {
    let (h, i, m) = (128usize, 512usize, 5usize);
    let host = HostLayer::quantized(h, i, 61);
    let x = activations(m * h, 62);
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let want = host.reference(&x, act);
        for world in [1usize, 2, 4, 8] {
            let shards = shard_ffn(&host.gate, &host.up, &host.down, world).unwrap();
            // Each rank in its own thread with its own backend (as ranks own their GPUs).
            let partials: Vec<[Vec<f64>; 2]> = std::thread::scope(|s| {
                let handles: Vec<_> = shards
                    .iter()
                    .map(|(g, u, d)| {
                        let x = &x;
                        s.spawn(move || {
                            let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
                            let w = DenseFfnWeights::upload(&gpu, g, u, d).unwrap();
                            let layer =
                                DenseFfnLayer::new_with_activation(w, act, gpu.clone()).unwrap();
                            let mut ctx = ForwardContext::new(&layer, m).unwrap();
                            let xs = upload_bf16(&gpu, x);
                            let km = download_bf16(
                                &gpu,
                                layer.forward_km(xs, m, &mut ctx, 0).unwrap(),
                                m * h,
                            );
                            let pf = download_bf16(
                                &gpu,
                                layer.forward_prefill(xs, m, &mut ctx, 0).unwrap(),
                                m * h,
                            );
                            [km, pf]
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let reduce = |path: usize| -> Vec<f64> {
                (0..m * h)
                    .map(|k| partials.iter().map(|p| p[path][k]).sum())
                    .collect()
            };
            for (path, y) in [("forward_km", reduce(0)), ("forward_prefill", reduce(1))] {
                let e = rel_l2(&y, &want);
                assert!(e < 1e-2, "{act:?} world {world} {path}: rel L2 {e}");
            }
        }
    }
}

#[test]
fn shapes_that_do_not_split_are_errors() {
    let host = HostLayer::quantized(128, 320, 1);
    // 320 / 2 = 160 is not a multiple of 64; 320 / 3 is not whole; 0 ranks.
    for world in [0usize, 2, 3] {
        assert!(
            matches!(
                shard_ffn(&host.gate, &host.up, &host.down, world),
                Err(Error::Shape(_))
            ),
            "world {world}"
        );
    }
    assert_eq!(
        shard_ffn(&host.gate, &host.up, &host.down, 5)
            .unwrap()
            .len(),
        5
    );
    assert!(shard_ffn(&host.gate, &host.gate, &host.down, 1).is_ok());
    assert!(matches!(
        shard_ffn(&host.gate, &host.up, &host.gate, 1),
        Err(Error::Shape(_))
    ));
    assert!(host.gate.slice_cols(8, 32).is_err());
    assert!(host.gate.slice_rows(10, 10).is_err());
}

/// Every weight format shards: rank layers (each over its slice, on its own backend in its own
/// thread) sum to the unsharded FFN on decode, km and prefill.
#[test]
fn every_format_shards_and_its_ranks_sum_to_the_ffn() {
    use denseffn::layer::OverlayKind;
    use denseffn::load::HostFfn;
    let (h, i, m) = (256usize, 1024usize, 4usize);
    let x = activations(m * h, 63);
    let nv = HostLayer::quantized(h, i, 64);
    let mut hosts = vec![HostFfn::Nvfp4([
        nv.gate.clone(),
        nv.up.clone(),
        nv.down.clone(),
    ])];
    for kind in [
        OverlayKind::Q2,
        OverlayKind::Q4k,
        OverlayKind::Fp8,
        OverlayKind::Bf16,
    ] {
        hosts.push(OverlayHost::random(kind, h, i, 65).host_ffn());
    }
    for host in &hosts {
        let [g, u, d] = host.values();
        let want = denseffn::reference::ffn_f64(&g, &u, &d, h, i, &x, FfnActivation::Silu);
        for world in [1usize, 2, 4] {
            let shards = host.shard(world).unwrap();
            assert_eq!(shards.len(), world);
            let partials: Vec<[Vec<f64>; 3]> = std::thread::scope(|s| {
                let hs: Vec<_> = shards
                    .iter()
                    .map(|shard| {
                        let x = &x;
                        s.spawn(move || {
                            let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
                            let layer = shard.layer(&gpu, FfnActivation::Silu).unwrap();
                            let mut ctx = ForwardContext::new(&layer, m).unwrap();
                            let xs = upload_bf16(&gpu, x);
                            let one =
                                download_bf16(&gpu, layer.forward(xs, &mut ctx, 0).unwrap(), h);
                            let km = download_bf16(
                                &gpu,
                                layer.forward_km(xs, m, &mut ctx, 0).unwrap(),
                                m * h,
                            );
                            let pf = download_bf16(
                                &gpu,
                                layer.forward_prefill(xs, m, &mut ctx, 0).unwrap(),
                                m * h,
                            );
                            [one, km, pf]
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for (p, name) in ["forward", "forward_km", "forward_prefill"]
                .iter()
                .enumerate()
            {
                let n = partials[0][p].len();
                let sum: Vec<f64> = (0..n)
                    .map(|k| partials.iter().map(|r| r[p][k]).sum())
                    .collect();
                let e = rel_l2(&sum, &want[..n]);
                assert!(
                    e < 1e-2,
                    "{} world {world} {name}: rel L2 {e}",
                    host.format()
                );
            }
        }
        // A split that breaks the format's unit is an error naming the format.
        let e = host.shard(3).unwrap_err();
        assert!(e.to_string().contains(host.format()), "{e}");
    }
}
