//! The CPU reference of the W4A4 MMQ arm's kernels (`quantize_nvfp4_act`,
//! `nvfp4_mmq_gate_up_act`): the same functions the GPU computes, built from the same shared math
//! (`denseffn_device::formats::nvfp4_mmq`), so quantized bytes agree exactly and GEMM results up
//! to f32 summation order (here: exact integer dots, f64 sums).
use super::cpu::Memory;
use super::cpu_kernels::amax;
use super::cpu_kernels::{gelu_tanh, silu};
use crate::error::{Error, Result};
use denseffn_device::formats::nvfp4_mmq::{
    self as fmt, act_code, act_global, act_scale, DOUBLED, GROUP, TILE_CODE_BYTES, TILE_K,
    TILE_ROWS, TILE_SCALE_BYTES,
};
use denseffn_device::formats::{e4m3, q4k_mmq::q8_pos};
use denseffn_device::params::{Q8Params, W4a4Params};
use half::bf16;

/// `quantize_nvfp4_act`: per token the global scale, per 16 values the E4M3 scale and E2M1
/// codes, stored as int8 doubled codes (32-blocks permuted) and f32 factors.
pub(crate) fn quantize(mem: &mut Memory, p: &Q8Params) -> Result<()> {
    let (t, k) = (p.tokens as usize, p.k as usize);
    if t == 0 || k == 0 || k % 32 != 0 {
        return Err(Error::Invalid(format!(
            "quantize_nvfp4_act: tokens={t} k={k}"
        )));
    }
    let x: Vec<u16> = bytemuck::allocation::pod_collect_to_vec(mem.read(p.x, t * k * 2)?);
    let mut qs = vec![0u8; t * k];
    let mut fs = vec![0f32; t * k / GROUP];
    for (tok, vals) in x.chunks_exact(k).enumerate() {
        let v: Vec<f32> = vals.iter().map(|&h| bf16::from_bits(h).to_f32()).collect();
        let g = act_global(amax(&v));
        for (j, grp) in v.chunks_exact(GROUP).enumerate() {
            let (_, f, inv) = act_scale(amax(grp), g);
            fs[tok * k / GROUP + j] = f;
            for (c, &x) in grp.iter().enumerate() {
                let idx = (j % 2) * GROUP + c;
                let q = DOUBLED[act_code(x, inv) as usize];
                qs[tok * k + (j / 2) * 32 + q8_pos(idx)] = q as u8;
            }
        }
    }
    mem.write(p.qs, t * k)?.copy_from_slice(&qs);
    mem.write(p.ds, t * k / GROUP * 4)?
        .copy_from_slice(bytemuck::cast_slice(&fs));
    Ok(())
}

/// `nvfp4_mmq_gate_up_act`: per row and token `global · Σ_group e4m3(s_w)·factor_x·Σ (2w)(2x)`
/// with exact integer dots, f64 sums, for gate and up; bf16 `act(gate)·up` out.
pub(crate) fn gemm(mem: &mut Memory, p: &W4a4Params) -> Result<()> {
    let (n, k, t) = (p.n as usize, p.k as usize, p.tokens as usize);
    if n == 0 || n % TILE_ROWS != 0 || k == 0 || k % 256 != 0 || t == 0 {
        return Err(Error::Invalid(format!(
            "nvfp4_mmq_gate_up_act: n={n} k={k} tokens={t}"
        )));
    }
    let xq: Vec<i8> = mem.read(p.xq, t * k)?.iter().map(|&b| b as i8).collect();
    let xs: Vec<f32> = bytemuck::allocation::pod_collect_to_vec(mem.read(p.xs, t * k / GROUP * 4)?);
    let (cb, sb) = fmt::bytes(n, k);
    let proj = |w: u64, s: u64, global: f32| -> Result<Vec<f64>> {
        Ok(project(
            mem.read(w, cb)?,
            mem.read(s, sb)?,
            n,
            k,
            t,
            &xq,
            &xs,
            global,
        ))
    };
    let gate = proj(p.w0, p.s0, p.gscale0)?;
    let up = proj(p.w1, p.s1, p.gscale1)?;
    let f = if p.act == 2 { gelu_tanh } else { silu };
    let b: Vec<u16> = gate
        .iter()
        .zip(&up)
        .map(|(&g, &u)| bf16::from_f64(f(g) * u).to_bits())
        .collect();
    mem.write(p.out, t * n * 2)?
        .copy_from_slice(bytemuck::cast_slice(&b));
    Ok(())
}

/// One projection, `y[tok][row]` (global scale included), row tiles spread over threads.
#[allow(clippy::too_many_arguments)]
fn project(
    codes: &[u8],
    scales: &[u8],
    n: usize,
    k: usize,
    t: usize,
    xq: &[i8],
    xs: &[f32],
    global: f32,
) -> Vec<f64> {
    let k_tiles = k / TILE_K;
    let mut y = super::cpu_mmq::by_row_tiles(n, t, |rt, part| {
        for kt in 0..k_tiles {
            let tile = rt * k_tiles + kt;
            let c = &codes[tile * TILE_CODE_BYTES..][..TILE_CODE_BYTES];
            let s = &scales[tile * TILE_SCALE_BYTES..][..TILE_SCALE_BYTES];
            for lr in 0..TILE_ROWS {
                for j in 0..TILE_K / GROUP {
                    let sw = e4m3::decode(s[fmt::scale_pos(lr, j)]);
                    let q: [i32; GROUP] = std::array::from_fn(|i| {
                        DOUBLED[fmt::code(c, lr, j * GROUP + i) as usize] as i32
                    });
                    let col = kt * TILE_K + j * GROUP;
                    for tok in 0..t {
                        let blk = &xq[tok * k + (col / 32) * 32..][..32];
                        let dot: i32 = (0..GROUP)
                            .map(|i| q[i] * blk[q8_pos(col % 32 + i)] as i32)
                            .sum();
                        let f = xs[tok * k / GROUP + col / GROUP];
                        part[lr * t + tok] += (sw * f) as f64 * dot as f64;
                    }
                }
            }
        }
    });
    for v in &mut y {
        *v *= global as f64;
    }
    y
}
