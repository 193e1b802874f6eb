//! The layer on the CPU reference backend: numerics against f64, launch counts, bad input.
mod common;
use common::*;
use denseffn::backend::{CpuBackend, DevicePtr, GpuBackend};
use denseffn::layer::{kernels, DenseFfnLayer, DenseFfnWeights, FfnActivation, ForwardContext};
use denseffn::pack::Nvfp4Host;
use denseffn::reference::rel_l2;
use denseffn::Error;
use std::sync::Arc;

fn cpu() -> Arc<dyn GpuBackend> {
    Arc::new(CpuBackend::new())
}

#[test]
fn decode_matches_f64_reference_both_activations() {
    for &(h, i) in &[(256usize, 512usize), (192, 320)] {
        let host = HostLayer::quantized(h, i, 7);
        for act in [FfnActivation::Silu, FfnActivation::Gelu] {
            let gpu = cpu();
            let layer = host.layer(&gpu, act);
            let mut ctx = ForwardContext::new(&layer, 1).unwrap();
            let x = activations(h, 11);
            let y = layer.forward(upload_bf16(&gpu, &x), &mut ctx, 0).unwrap();
            let got = download_bf16(&gpu, y, h);
            let want = host.reference(&x, act);
            let err = rel_l2(&got, &want);
            assert!(err < 1e-2, "({h}, {i}) {act:?}: rel L2 {err}");
            assert!(
                want.iter().any(|v| v.abs() > 1e-3),
                "reference is trivially small"
            );
        }
    }
}

#[test]
fn launch_counts_silu_two_gelu_three() {
    let host = HostLayer::quantized(128, 256, 3);
    for (act, n) in [(FfnActivation::Silu, 2u64), (FfnActivation::Gelu, 3)] {
        let gpu = cpu();
        let layer = host.layer(&gpu, act);
        assert_eq!(layer.decode_kernels().len() as u64, n);
        let mut ctx = ForwardContext::new(&layer, 4).unwrap();
        let x = upload_bf16(&gpu, &activations(4 * 128, 1));
        let before = gpu.launch_count();
        layer.forward(x, &mut ctx, 0).unwrap();
        assert_eq!(gpu.launch_count() - before, n, "{act:?} forward");
        let before = gpu.launch_count();
        layer.forward_batched(x, 4, &mut ctx, 0).unwrap();
        assert_eq!(
            gpu.launch_count() - before,
            4 * n,
            "{act:?} forward_batched(4)"
        );
    }
}

#[test]
fn forward_batched_rows_equal_single_forward() {
    let (h, i) = (128, 256);
    let host = HostLayer::quantized(h, i, 5);
    let gpu = cpu();
    let layer = host.layer(&gpu, FfnActivation::Silu);
    let mut ctx = ForwardContext::new(&layer, 3).unwrap();
    let x = activations(3 * h, 9);
    let batched = download_bf16(
        &gpu,
        layer
            .forward_batched(upload_bf16(&gpu, &x), 3, &mut ctx, 0)
            .unwrap(),
        3 * h,
    );
    for t in 0..3 {
        let single = download_bf16(
            &gpu,
            layer
                .forward(upload_bf16(&gpu, &x[t * h..(t + 1) * h]), &mut ctx, 0)
                .unwrap(),
            h,
        );
        assert_eq!(&batched[t * h..(t + 1) * h], &single[..], "token {t}");
    }
}

#[test]
fn quantizer_error_is_bounded() {
    let (r, c) = (64, 256);
    let w: Vec<f32> = activations(r * c, 21);
    let q = Nvfp4Host::quantize(&w, r, c).unwrap();
    let d = q.dequantize();
    let mut se = 0.0f64;
    for (g, (wg, dg)) in w.chunks(16).zip(d.chunks(16)).enumerate() {
        let step = denseffn_device::formats::e4m3::decode(q.scales[g]) * q.global;
        let gmax = wg.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let bound = step + (gmax - 6.0 * step).max(0.0) + 1e-6;
        for (a, b) in wg.iter().zip(dg) {
            assert!(
                (a - b).abs() <= bound,
                "group {g}: {a} -> {b}, bound {bound}"
            );
            se += ((a - b) as f64).powi(2);
        }
    }
    let rms = (se / (r * c) as f64).sqrt();
    // Gaussian data, per-16 E4M3 scales: about 9% of the RMS (measured 0.094 here).
    assert!(rms < 0.11, "quantization RMS error {rms}");
    assert!(rms > 0.02, "suspiciously exact quantization: {rms}");
    let (codes, scales) = q.to_tiled("w").unwrap();
    assert_eq!((codes.len(), scales.len()), (q.codes.len(), q.scales.len()));
}

#[test]
fn tiled_copy_decodes_to_the_same_values() {
    let (r, c) = (32, 128);
    let q = Nvfp4Host::quantize(&activations(r * c, 4), r, c).unwrap();
    let (codes, scales) = q.to_tiled("w").unwrap();
    let d = q.dequantize();
    let mut tile = [[0f32; 64]; 16];
    for rt in 0..r / 16 {
        for kt in 0..c / 64 {
            let t = rt * (c / 64) + kt;
            denseffn_device::formats::nvfp4::decode_tile(
                &codes[t * 512..],
                &scales[t * 64..],
                &mut tile,
            );
            for (lr, row) in tile.iter().enumerate() {
                for (lc, &v) in row.iter().enumerate() {
                    assert_eq!(v * q.global, d[(rt * 16 + lr) * c + kt * 64 + lc]);
                }
            }
        }
    }
}

fn err_of<T>(r: Result<T, Error>) -> Error {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[test]
fn bad_weights_are_clear_errors() {
    let gpu = cpu();
    let h = HostLayer::quantized(128, 256, 1);
    // Shape mismatch: down must be [hidden, inter].
    let e = err_of(DenseFfnWeights::upload(&gpu, &h.gate, &h.up, &h.gate));
    assert!(
        matches!(e, Error::Shape(ref s) if s.contains("down")),
        "{e}"
    );
    // Rows the decode layout cannot hold.
    let odd = HostLayer::quantized(128, 208, 1);
    let e = err_of(DenseFfnWeights::upload(&gpu, &odd.gate, &odd.up, &odd.down));
    assert!(e.to_string().contains("multiple of 16"), "{e}");
    // Columns not a multiple of the NVFP4 group, zero sizes.
    assert!(matches!(
        Nvfp4Host::quantize(&[0.0; 24], 2, 12),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        Nvfp4Host::quantize(&[], 0, 16),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        Nvfp4Host::quantize(&[1.0; 16], 2, 16),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        Nvfp4Host::quantize(&[f32::NAN; 16], 1, 16),
        Err(Error::BadWeights(_))
    ));
    // NaN scale, negative scale, bad global: named tensor, nothing left allocated.
    for (byte, what) in [(0x7Fu8, "NaN"), (0xB8, "negative")] {
        let mut up = h.up.clone();
        up.scales[5] = byte;
        let e = err_of(DenseFfnWeights::upload(&gpu, &h.gate, &up, &h.down));
        assert!(
            matches!(e, Error::BadWeights(ref s) if s.contains("up") && s.contains(what)),
            "{e}"
        );
    }
    let mut down = h.down.clone();
    down.global = f32::INFINITY;
    assert!(matches!(
        DenseFfnWeights::upload(&gpu, &h.gate, &h.up, &down),
        Err(Error::BadWeights(_))
    ));
    let mut gate = h.gate.clone();
    gate.codes.pop();
    assert!(matches!(
        DenseFfnWeights::upload(&gpu, &gate, &h.up, &h.down),
        Err(Error::Shape(_))
    ));
}

#[test]
fn out_of_memory_during_upload_leaves_nothing_allocated() {
    let h = HostLayer::quantized(128, 256, 2);
    let full = {
        let gpu = Arc::new(CpuBackend::new());
        let g: Arc<dyn GpuBackend> = gpu.clone();
        let _w = DenseFfnWeights::upload(&g, &h.gate, &h.up, &h.down).unwrap();
        gpu.used_bytes()
    };
    // Every capacity short of the full size fails at some allocation; none may leak.
    for cap in [0, 1, full / 4, full / 2, full - 1] {
        let gpu = Arc::new(CpuBackend::with_capacity(cap));
        let g: Arc<dyn GpuBackend> = gpu.clone();
        let e = err_of(DenseFfnWeights::upload(&g, &h.gate, &h.up, &h.down));
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        assert_eq!(
            (gpu.used_bytes(), gpu.live_allocations()),
            (0, 0),
            "capacity {cap}"
        );
    }
}

#[test]
fn missing_kernel_is_named_and_nothing_launches() {
    let h = HostLayer::quantized(128, 256, 2);
    for (act, missing) in [
        (FfnActivation::Silu, kernels::SILU_DOWN),
        (FfnActivation::Gelu, kernels::GELU_MUL),
        (FfnActivation::Silu, kernels::GATE_UP),
    ] {
        let gpu: Arc<dyn GpuBackend> = Arc::new(CpuBackend::new().without_kernels(&[missing]));
        let layer = h.layer(&gpu, act);
        let mut ctx = ForwardContext::new(&layer, 1).unwrap();
        let x = upload_bf16(&gpu, &activations(128, 1));
        let e = err_of(layer.forward(x, &mut ctx, 0));
        assert!(
            matches!(e, Error::MissingKernel(ref k) if k == missing),
            "{e}"
        );
        assert!(e.to_string().contains(missing));
        assert_eq!(gpu.launch_count(), 0);
    }
}

/// Every forward path of `layer` on `x` (8 tokens' room), results only.
fn every_path(
    layer: &DenseFfnLayer,
    x: DevicePtr,
    ctx: &mut ForwardContext,
) -> [Result<(), Error>; 6] {
    [
        layer.forward(x, ctx, 0).map(|_| ()),
        layer.forward_batched(x, 2, ctx, 0).map(|_| ()),
        layer.forward_k2(x, ctx, 0).map(|_| ()),
        layer.forward_k3(x, ctx, 0).map(|_| ()),
        layer.forward_km(x, 5, ctx, 0).map(|_| ()),
        layer.forward_prefill(x, 8, ctx, 0).map(|_| ()),
    ]
}

#[test]
fn bad_call_arguments_are_clear_errors() {
    let h = HostLayer::quantized(128, 256, 2);
    let gpu = cpu();
    let layer = h.layer(&gpu, FfnActivation::Silu);
    let mut ctx = ForwardContext::new(&layer, 2).unwrap();
    // Input too short for one token; pointer outside any allocation.
    let short = gpu.alloc(100).unwrap();
    assert!(
        matches!(layer.forward(short, &mut ctx, 0), Err(Error::Invalid(ref s)) if s.contains("input"))
    );
    assert!(matches!(
        layer.forward(DevicePtr(0x10), &mut ctx, 0),
        Err(Error::BadAccess(_))
    ));
    // Token counts outside the context.
    let x = upload_bf16(&gpu, &activations(2 * 128, 1));
    assert!(matches!(
        layer.forward_batched(x, 0, &mut ctx, 0),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        layer.forward_batched(x, 3, &mut ctx, 0),
        Err(Error::Invalid(_))
    ));
    // A context made for another shape.
    let other = HostLayer::quantized(192, 256, 2).layer(&gpu, FfnActivation::Silu);
    let mut wrong = ForwardContext::new(&other, 1).unwrap();
    assert!(matches!(
        layer.forward(x, &mut wrong, 0),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        ForwardContext::new(&layer, 0),
        Err(Error::Invalid(_))
    ));
    // A misaligned input (the kernels read 16-byte vectors) is refused by every path before any
    // launch; a whole-token offset is fine.
    let x8 = upload_bf16(&gpu, &activations(9 * 128, 3));
    let mut ctx8 = ForwardContext::new(&layer, 8).unwrap();
    let before = gpu.launch_count();
    for off in [2usize, 4, 8] {
        let bad = x8.offset(off);
        let results = every_path(&layer, bad, &mut ctx8);
        for (i, r) in results.into_iter().enumerate() {
            assert!(
                matches!(r, Err(Error::Invalid(ref s)) if s.contains("16-byte aligned")),
                "offset {off}, path {i}: {r:?}"
            );
        }
    }
    assert_eq!(
        gpu.launch_count(),
        before,
        "launched with a misaligned input"
    );
    let second = layer.forward(x8.offset(128 * 2), &mut ctx8, 0).unwrap();
    let a = download_bf16(&gpu, second, 128);
    let both = layer.forward_batched(x8, 2, &mut ctx8, 0).unwrap();
    let b = download_bf16(&gpu, both, 256);
    assert_eq!(
        a,
        b[128..].to_vec(),
        "a whole-token offset reads the second token"
    );
    // A context made on another backend (same shape) is refused by every path before any launch.
    let other_gpu = cpu();
    let twin = h.layer(&other_gpu, FfnActivation::Silu);
    let mut foreign = ForwardContext::new(&twin, 8).unwrap();
    let before = gpu.launch_count();
    let results = every_path(&layer, x8, &mut foreign);
    for (i, r) in results.into_iter().enumerate() {
        assert!(
            matches!(r, Err(Error::Invalid(ref s)) if s.contains("make the context from this layer")),
            "path {i}: {r:?}"
        );
    }
    assert_eq!(gpu.launch_count(), before);
    assert_eq!(other_gpu.launch_count(), 0);
    // Weights of different layers in one layer.
    let w = DenseFfnWeights::upload(&gpu, &h.gate, &h.up, &h.down).unwrap();
    assert!(DenseFfnLayer::new(w, gpu.clone()).is_ok());
}

#[test]
fn cpu_backend_reports_out_of_bounds_access() {
    let gpu = CpuBackend::new();
    let p = gpu.alloc(16).unwrap();
    let mut buf = [0u8; 32];
    assert!(matches!(
        gpu.download(&mut buf, p),
        Err(Error::BadAccess(_))
    ));
    assert!(matches!(
        gpu.upload(p.offset(8), &[0u8; 16]),
        Err(Error::BadAccess(_))
    ));
    assert_eq!(gpu.bytes_from(p.offset(4)), Some(12));
    gpu.free(p).unwrap();
    assert!(gpu.free(p).is_err());
    assert!(matches!(gpu.alloc(0), Err(Error::Invalid(_))));
}

#[test]
fn cuda_backend_without_a_gpu_is_an_error_not_a_panic() {
    // On a machine with a GPU this constructs one; either way it must not panic.
    match denseffn::backend::CudaBackend::new() {
        Ok(c) => assert!(c.sm_count() > 0),
        Err(e) => assert!(matches!(e, Error::NoDevice(_) | Error::Driver(_)), "{e}"),
    }
}

#[test]
fn footprint_accounts_for_every_byte_the_backend_holds() {
    let h = HostLayer::quantized(128, 256, 2);
    let cpu = Arc::new(CpuBackend::new());
    let gpu: Arc<dyn GpuBackend> = cpu.clone();
    let mut layer = h.layer(&gpu, FfnActivation::Silu);
    let f = layer.footprint();
    // NVFP4: 4.5 bits per value (codes + one E4M3 scale per 16), for three 128×256 matrices.
    assert_eq!(f.decode_weights, 3 * 128 * 256 * 9 / 16);
    assert_eq!(f.t_copies, f.decode_weights);
    assert_eq!((f.mmq_copies, f.overlays), (0, 0));
    assert_eq!(cpu.used_bytes(), f.total());
    let ctx = ForwardContext::new(&layer, 4).unwrap();
    assert_eq!(cpu.used_bytes(), f.total() + ctx.bytes());
    drop(ctx);
    drop(std::mem::replace(
        &mut layer,
        h.layer(&gpu, FfnActivation::Gelu),
    ));
    assert_eq!(
        cpu.used_bytes(),
        f.total(),
        "dropping a layer frees all it held"
    );
}
