//! Elementwise activations: `out = act(g) * u`, f32, 4 elements per thread.
use crate::dsl::*;
use crate::params::ElementwiseParams;

/// GELU, tanh form (as Gemma uses): `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    let y = 0.797_884_6 * (x + 0.044_715 * x * x * x);
    // tanh(y) = 1 - 2/(1 + e^{2y}): saturates to ±1 without overflow trouble.
    let t = 1.0 - 2.0 / (1.0 + exp(2.0 * y));
    0.5 * x * (1.0 + t)
}

/// A programmatic dependent of the GEMV that writes `g` and `u` (waits for it first; a no-op
/// for an ordinary launch), and lets its own dependent start at once.
#[inline(always)]
unsafe fn apply(p: &ElementwiseParams, f: impl Fn(f32) -> f32) {
    grid_dependency_wait();
    launch_dependents();
    let base = (block_x() * 256 + thread_x()) * 4;
    for i in 0..4 {
        let idx = base + i;
        if idx < p.len {
            let g = *(p.g as *const f32).add(idx as usize);
            let u = *(p.u as *const f32).add(idx as usize);
            *(p.out as *mut f32).add(idx as usize) = f(g) * u;
        }
    }
}

/// `out = gelu_tanh(g) * u`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gelu_mul(p: ElementwiseParams) {
    apply(&p, gelu_tanh)
}
