//! Streams and graph capture on the CPU reference backend, as `GpuBackend` documents them:
//! captured work is recorded, not run; a replay runs it (counted launches) and gives exactly
//! the direct call's result; the CUDA rules (no capture of stream 0, none twice, no events on a
//! capturing stream) are errors, never panics.
mod common;
use common::*;
use denseffn::backend::{CpuBackend, GpuBackend, Graph, GraphHandle, Stream};
use denseffn::layer::{FfnActivation, ForwardContext};
use denseffn::Error;
use std::sync::Arc;

fn cpu() -> Arc<dyn GpuBackend> {
    Arc::new(CpuBackend::new())
}

#[test]
fn replayed_decode_paths_equal_direct_calls_and_count_their_launches() {
    let (h, i) = (128, 256);
    let host = HostLayer::quantized(h, i, 5);
    for act in [FfnActivation::Silu, FfnActivation::Gelu] {
        let gpu = cpu();
        let layer = host.layer(&gpu, act);
        let mut ctx = ForwardContext::new(&layer, 8).unwrap();
        let x = upload_bf16(&gpu, &activations(8 * h, 9));
        let stream = Stream::new(&gpu).unwrap();
        let s = stream.raw();
        for m in 1..=8 {
            let y = layer.forward_km(x, m, &mut ctx, s).unwrap();
            let want = download_bf16(&gpu, y, m * h);
            gpu.memset(y, 0, m * h * 2).unwrap();
            let before = gpu.launch_count();
            let (graph, out) =
                Graph::capture(&gpu, s, || layer.forward_km(x, m, &mut ctx, s)).unwrap();
            assert_eq!(gpu.launch_count(), before, "captured launches must not run");
            assert!(
                download_bf16(&gpu, out, m * h).iter().all(|v| *v == 0.0),
                "capture must not write the output"
            );
            graph.launch(s).unwrap();
            assert_eq!(gpu.launch_count() - before, 4, "forward_km({m}) replay");
            assert_eq!(download_bf16(&gpu, out, m * h), want, "{act:?} m = {m}");
            // A second replay, on another stream (also 0), gives the same again.
            gpu.memset(out, 0, m * h * 2).unwrap();
            graph.launch(0).unwrap();
            assert_eq!(download_bf16(&gpu, out, m * h), want);
        }
        let y = layer.forward(x, &mut ctx, s).unwrap();
        let want = download_bf16(&gpu, y, h);
        let (graph, _) = Graph::capture(&gpu, s, || layer.forward(x, &mut ctx, s)).unwrap();
        gpu.memset(y, 0, h * 2).unwrap();
        let before = gpu.launch_count();
        graph.launch(s).unwrap();
        assert_eq!(
            gpu.launch_count() - before,
            layer.decode_kernels().len() as u64
        );
        assert_eq!(download_bf16(&gpu, y, h), want);
    }
}

#[test]
fn copies_are_captured_too() {
    let gpu = cpu();
    let (a, b) = (gpu.alloc(64).unwrap(), gpu.alloc(64).unwrap());
    gpu.upload(a, &[7u8; 64]).unwrap();
    gpu.memset(b, 0, 64).unwrap();
    let stream = Stream::new(&gpu).unwrap();
    let (graph, ()) = Graph::capture(&gpu, stream.raw(), || {
        gpu.copy_async(b, a, 64, stream.raw())
    })
    .unwrap();
    let mut got = [1u8; 64];
    gpu.download(&mut got, b).unwrap();
    assert_eq!(got, [0u8; 64], "not copied before the replay");
    graph.launch(stream.raw()).unwrap();
    gpu.download(&mut got, b).unwrap();
    assert_eq!(got, [7u8; 64]);
}

#[test]
fn capture_rules_are_errors() {
    let gpu = cpu();
    // The legacy default stream cannot be captured; neither can a stream never created.
    assert!(matches!(gpu.begin_capture(0), Err(Error::Invalid(m)) if m.contains("default stream")));
    assert!(matches!(gpu.begin_capture(12345), Err(Error::Invalid(_))));
    let s = gpu.create_stream().unwrap();
    assert!(
        matches!(gpu.end_capture(s), Err(Error::Invalid(_))),
        "not capturing"
    );
    gpu.begin_capture(s).unwrap();
    assert!(matches!(gpu.begin_capture(s), Err(Error::Invalid(m)) if m.contains("already")));
    assert!(
        matches!(gpu.record_event(s), Err(Error::Invalid(_))),
        "no events while capturing"
    );
    assert!(
        gpu.record_event(0).is_ok(),
        "other streams still take events"
    );
    assert!(
        matches!(gpu.destroy_stream(s), Err(Error::Invalid(_))),
        "capturing"
    );
    let g = gpu.end_capture(s).unwrap();
    gpu.launch_graph(&g, s).unwrap(); // an empty graph runs nothing
    let id = g.0;
    gpu.destroy_graph(g).unwrap();
    assert!(matches!(
        gpu.launch_graph(&GraphHandle(id), s),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        gpu.destroy_graph(GraphHandle(id)),
        Err(Error::Invalid(_))
    ));
    gpu.destroy_stream(s).unwrap();
    assert!(
        matches!(gpu.destroy_stream(s), Err(Error::Invalid(_))),
        "destroyed twice"
    );
}

#[test]
fn a_failing_capture_ends_it_and_names_the_missing_kernel() {
    let (h, i) = (128, 256);
    let host = HostLayer::quantized(h, i, 6);
    let gpu: Arc<dyn GpuBackend> =
        Arc::new(CpuBackend::new().without_kernels(&["gemv_nvfp4_silu_down"]));
    let layer = host.layer(&gpu, FfnActivation::Silu);
    let mut ctx = ForwardContext::new(&layer, 1).unwrap();
    let x = upload_bf16(&gpu, &activations(h, 2));
    let stream = Stream::new(&gpu).unwrap();
    let r = Graph::capture(&gpu, stream.raw(), || {
        layer.forward(x, &mut ctx, stream.raw())
    });
    assert!(matches!(r, Err(Error::MissingKernel(k)) if k == "gemv_nvfp4_silu_down"));
    // The stream is usable again: a new capture starts.
    let (_g, ()) = Graph::capture(&gpu, stream.raw(), || Ok(())).unwrap();
}

#[test]
fn graphs_and_streams_are_freed_on_drop() {
    let gpu = cpu();
    let stream = Stream::new(&gpu).unwrap();
    let raw = stream.raw();
    let (graph, ()) = Graph::capture(&gpu, raw, || Ok(())).unwrap();
    drop(graph);
    drop(stream);
    assert!(
        matches!(gpu.destroy_stream(raw), Err(Error::Invalid(_))),
        "already destroyed"
    );
}
