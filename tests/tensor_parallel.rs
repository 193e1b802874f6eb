//! Simulated tensor parallelism on the CPU backend: ranks in threads, each a layer over its
//! shard; the sum of their outputs (the all-reduce) equals the unsharded FFN.
mod common;
use common::*;
use denseffn::backend::{CpuBackend, DevicePtr, GpuBackend};
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

/// The run-time sharded layer: each rank's `ShardedFfnLayer` (its shard + a `CpuAllReduce` of
/// the group) returns the whole FFN on every path, bit-identical on every rank, for every
/// format and both activations.
#[test]
fn sharded_layers_all_reduce_to_the_ffn_on_every_path() {
    use denseffn::layer::OverlayKind;
    use denseffn::load::HostFfn;
    use denseffn::tp::{shard_layers, AllReduce, CpuAllReduce, ShardedFfnLayer};
    let (h, i, n) = (256usize, 1024usize, 11usize);
    let x = activations(n * h, 71);
    let nv = HostLayer::quantized(h, i, 72);
    let mut hosts = vec![HostFfn::Nvfp4([nv.gate, nv.up, nv.down])];
    for kind in [OverlayKind::Q2, OverlayKind::Fp8, OverlayKind::Bf16] {
        hosts.push(OverlayHost::random(kind, h, i, 73).host_ffn());
    }
    hosts.push(OverlayHost::random(OverlayKind::Q4k, h, i, 74).host_ffn());
    type Run = fn(&ShardedFfnLayer, DevicePtr, &mut ForwardContext) -> DevicePtr;
    let paths: [(&str, usize, Run); 5] = [
        ("forward", 1, |l, x, c| l.forward(x, c, 0).unwrap()),
        ("forward_k2", 2, |l, x, c| l.forward_k2(x, c, 0).unwrap()),
        ("forward_k3", 3, |l, x, c| l.forward_k3(x, c, 0).unwrap()),
        ("forward_km", 5, |l, x, c| l.forward_km(x, 5, c, 0).unwrap()),
        ("forward_prefill", 11, |l, x, c| {
            l.forward_prefill(x, 11, c, 0).unwrap()
        }),
    ];
    for host in &hosts {
        let [g, u, d] = host.values();
        for act in [FfnActivation::Silu, FfnActivation::Gelu] {
            let want = denseffn::reference::ffn_f64(&g, &u, &d, h, i, &x, act);
            for world in [1usize, 2, 4] {
                let gpus: Vec<Arc<dyn GpuBackend>> = (0..world)
                    .map(|_| Arc::new(CpuBackend::new()) as Arc<dyn GpuBackend>)
                    .collect();
                let comms = CpuAllReduce::group(&gpus)
                    .unwrap()
                    .into_iter()
                    .map(|c| Box::new(c) as Box<dyn AllReduce>)
                    .collect();
                let ranks = shard_layers(host, act, &gpus, comms).unwrap();
                assert!(ranks.iter().enumerate().all(|(r, l)| l.rank() == r
                    && l.world_size() == world
                    && l.layer().intermediate() == i / world));
                let outs: Vec<Vec<Vec<f64>>> = std::thread::scope(|s| {
                    let hs: Vec<_> = ranks
                        .iter()
                        .zip(&gpus)
                        .map(|(rank, gpu)| {
                            let x = &x;
                            s.spawn(move || {
                                let mut ctx = ForwardContext::new(rank.layer(), n).unwrap();
                                let xs = upload_bf16(gpu, x);
                                paths
                                    .iter()
                                    .map(|(_, t, run)| {
                                        download_bf16(gpu, run(rank, xs, &mut ctx), t * h)
                                    })
                                    .collect()
                            })
                        })
                        .collect();
                    hs.into_iter().map(|h| h.join().unwrap()).collect()
                });
                for (p, (name, t, _)) in paths.iter().enumerate() {
                    for r in 1..world {
                        assert_eq!(outs[r][p], outs[0][p], "{name}: rank {r} differs");
                    }
                    let e = rel_l2(&outs[0][p], &want[..t * h]);
                    assert!(
                        e < 1e-2,
                        "{} {act:?} world {world} {name}: rel L2 {e}",
                        host.format()
                    );
                }
            }
        }
    }
}

/// A communicator group that does not match the backends, or a rank that disagrees on the
/// count, is an error on every rank (none is left waiting).
#[test]
fn mismatched_groups_and_counts_are_errors() {
    use denseffn::load::HostFfn;
    use denseffn::tp::{shard_layers, AllReduce, CpuAllReduce};
    let nv = HostLayer::quantized(128, 256, 75);
    let host = HostFfn::Nvfp4([nv.gate, nv.up, nv.down]);
    let gpus: Vec<Arc<dyn GpuBackend>> = (0..2)
        .map(|_| Arc::new(CpuBackend::new()) as Arc<dyn GpuBackend>)
        .collect();
    let one = CpuAllReduce::group(&gpus[..1])
        .unwrap()
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn AllReduce>)
        .collect();
    assert!(shard_layers(&host, FfnActivation::Silu, &gpus, one).is_err());
    assert!(CpuAllReduce::group(&[]).is_err());
    let comms = CpuAllReduce::group(&gpus).unwrap();
    let errs: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .zip(&gpus)
            .enumerate()
            .map(|(r, (c, gpu))| {
                s.spawn(move || {
                    let buf = upload_bf16(gpu, &activations(8, 76));
                    let count = if r == 0 { 8 } else { 4 };
                    c.all_reduce_bf16(buf, count, 0).unwrap_err().to_string()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(errs.iter().all(|e| e.contains("all-reduce")), "{errs:?}");
}

/// LoRA under tensor parallelism: rank r's layer holds its FFN shard and `LoraFfnWeights::shard`'s
/// r-th adapters; the sum of the rank outputs (the all-reduce) equals the unsharded FFN with the
/// deltas merged, on decode, km and prefill.
#[test]
fn lora_shards_sum_to_the_unsharded_lora_ffn() {
    let (h, i, m) = (128usize, 512usize, 5usize);
    let host = HostLayer::random(h, i, 63);
    let lora = lora_weights(h, i, 16, 64);
    let x = activations(m * h, 65);
    assert!(lora.shard(3).is_err() && lora.shard(0).is_err());
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let want = host.lora_reference(&lora, &x, act);
        for world in [1usize, 2, 4] {
            let shards = shard_ffn(&host.gate, &host.up, &host.down, world).unwrap();
            let adapters = lora.shard(world).unwrap();
            let partials: Vec<[Vec<f64>; 3]> = shards
                .iter()
                .zip(adapters)
                .map(|((g, u, d), a)| {
                    let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new());
                    let w = DenseFfnWeights::upload(&gpu, g, u, d).unwrap();
                    let mut layer =
                        DenseFfnLayer::new_with_activation(w, act, gpu.clone()).unwrap();
                    layer.set_lora_weights(a).unwrap();
                    let mut ctx = ForwardContext::new(&layer, m).unwrap();
                    [("forward", 1), ("km", m), ("prefill", m)]
                        .map(|(p, n)| path_output(&layer, &gpu, p, n, &x, &mut ctx).unwrap())
                })
                .collect();
            for (p, n) in [(0, 1), (1, m), (2, m)] {
                let y: Vec<f64> = (0..n * h)
                    .map(|k| partials.iter().map(|r| r[p][k]).sum())
                    .collect();
                let e = rel_l2(&y, &want[..n * h]);
                assert!(e < 1e-2, "{act:?} world {world} path {p}: rel L2 {e}");
            }
        }
    }
}
