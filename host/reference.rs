//! The f64 reference FFN over dequantized weights: what every path is measured against.
use crate::backend::cpu_kernels::{gelu_tanh, silu};
use crate::layer::FfnActivation;

/// `y[t] = down · (act(gate · x[t]) ⊙ up · x[t])` in f64. Weights row-major f32 (gate, up
/// `[inter][hidden]`, down `[hidden][inter]`), `x` `[m][hidden]`; returns `[m][hidden]`.
pub fn ffn_f64(
    gate: &[f32],
    up: &[f32],
    down: &[f32],
    hidden: usize,
    inter: usize,
    x: &[f32],
    act: FfnActivation,
) -> Vec<f64> {
    let m = x.len() / hidden;
    let f = match act {
        FfnActivation::Silu => silu,
        FfnActivation::Gelu => gelu_tanh,
    };
    let dot = |w: &[f32], v: &[f64]| w.iter().zip(v).map(|(&a, &b)| a as f64 * b).sum::<f64>();
    let mut y = Vec::with_capacity(m * hidden);
    for t in 0..m {
        let xt: Vec<f64> = x[t * hidden..(t + 1) * hidden]
            .iter()
            .map(|&v| v as f64)
            .collect();
        let a: Vec<f64> = (0..inter)
            .map(|j| {
                f(dot(&gate[j * hidden..(j + 1) * hidden], &xt))
                    * dot(&up[j * hidden..(j + 1) * hidden], &xt)
            })
            .collect();
        y.extend((0..hidden).map(|r| dot(&down[r * inter..(r + 1) * inter], &a)));
    }
    y
}

/// Relative L2 error `‖got − want‖ / ‖want‖`.
pub fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f64 = want.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}
