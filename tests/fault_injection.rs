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
