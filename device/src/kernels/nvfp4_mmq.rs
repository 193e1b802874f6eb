//! The NVFP4 W4A4 MMQ prefill arm (`nvfp4_mmq`): activations quantized to NVFP4 on the GPU
//! (`quantize_nvfp4_act`) and gate+up as NVFP4 × NVFP4 on integer tensor cores
//! (`nvfp4_mmq_gate_up_act`, the activation fused, bf16 `act(g)·u` out). Down stays on the bf16
//! tensor-core GEMM over down's `_t` copy (`gemm_nvfp4_t_down`): 3 launches per prefill.
//!
//! **Why `mma.m16n8k16` s8, one per 16-value group.** Doubled E2M1 values are the integers {0,
//! ±1, ±2, ±3, ±4, ±6, ±8, ±12}, so a group's 16 products sum exactly in s32; but every 16
//! values carry their own weight AND activation scale, so the f32 epilogue (convert the s32
//! dot, multiply the two scales, accumulate: 4 `I2F` + 4 `FMUL` + 4 `FFMA` per lane, 12 lane
//! ops for 16×8×16 = 2048 MACs) runs once per group whatever the `mma` shape. With `k16` one
//! `mma` is exactly one group. With `m16n8k32` one `mma` spans two groups whose scales differ,
//! so it cannot be used as is: the groups must be split by zeroing half of A (two k32 `mma`s
//! per 32 columns: twice the tensor work for the same epilogue) — there is no per-16 scaling
//! inside the instruction. Folding the scales into int8 is not exact (`2·e2m1 · e4m3` needs
//! more than 8 bits). So per 16×8×32 of work: k16 = 2 `mma` + 24 epilogue ops, k32 split = 2
//! `mma` at twice the tensor cost + 24 ops. The A fragments come from 4-bit codes with 3
//! `prmt` (magnitude, negated magnitude, sign mask) and a select per 4 values ([`expand`]),
//! amortized over the 8 token fragments; the B fragments (activations stored expanded, one int8 a value) need
//! no conversion.
//!
//! Block: 8 warps stacked along the rows, one 16-row tile of gate and one of up each (128 rows),
//! and 64 tokens (8 fragments of 8). Per 256 columns (4 tiles of 64) each lane loads, per
//! projection, 4 × 16 bytes of codes and 4 × 8 bytes of scales straight from global memory (the
//! layout is fragment-ordered, `formats::nvfp4_mmq`), the next 256 columns' loads in flight
//! while the current ones are used; activations (int8 codes, f32 factors per 16) are staged
//! per 256 columns in shared memory, double-buffered, with the Q4_K MMQ kernel's staging (the
//! buffers have the same shape: 256 code bytes and 16 f32 a token).
use super::elementwise::gelu_tanh;
use super::gemv::silu;
use super::mmq::{stage_load, stage_store, Act, Staged, BUF_BYTES, QS_BYTES};
use crate::dsl::*;
use crate::formats::nvfp4_mmq::{
    act_code, act_global, act_scale, DOUBLED, TILE_CODE_BYTES, TILE_K, TILE_SCALE_BYTES,
};
use crate::formats::q4k_mmq::q8_pos;
use crate::params::{
    Q8Params, W4a4Params, MMQ_SMEM_TOKEN_STRIDE, MMQ_TOKENS_PER_BLOCK, NVFP4_ACT_THREADS,
};

const WARPS: u32 = 8;
/// Columns staged per step (4 tiles).
const CHUNK: u32 = 256;
/// `2·e2m1` of codes 0..8 as bytes, and their negations.
const POS: [u32; 2] = [lut(0), lut(4)];
const NEG: [u32; 2] = [lut(8), lut(12)];

const fn lut(c: usize) -> u32 {
    (DOUBLED[c] as u8 as u32)
        | ((DOUBLED[c + 1] as u8 as u32) << 8)
        | ((DOUBLED[c + 2] as u8 as u32) << 16)
        | ((DOUBLED[c + 3] as u8 as u32) << 24)
}

/// Four E2M1 codes (nibbles of the low 16 bits, nibble `i` → byte `i`) to four int8 `2·e2m1`.
#[inline(always)]
fn expand(h: u32) -> u32 {
    let sel = h & 0x7777;
    let pos = prmt(POS[0], POS[1], sel);
    let neg = prmt(NEG[0], NEG[1], sel);
    // Selector nibble 0xC picks byte 4 (0x80) with its sign replicated: 0xFF; 0 picks 0x00.
    let m = prmt(0, 0x8080_8080, ((h >> 3) & 0x1111) * 12);
    (pos & !m) | (neg & m)
}

/// One lane's share of one projection for 256 columns: per tile, 4 code words (one per group)
/// and its two rows' 8 scale bytes.
#[derive(Clone, Copy)]
struct Lane {
    codes: [[u32; 4]; 4],
    scales: [[u32; 2]; 4],
}

const ZERO: Lane = Lane {
    codes: [[0; 4]; 4],
    scales: [[0; 2]; 4],
};

#[inline(always)]
unsafe fn load_chunk(codes: u64, scales: u64, tile0: u32) -> Lane {
    let mut l = ZERO;
    unroll4!(T, 0 => {
        let tile = (tile0 + T as u32) as usize;
        let c = (codes as *const u8).add(tile * TILE_CODE_BYTES + lane() as usize * 16);
        let s = (scales as *const u8).add(tile * TILE_SCALE_BYTES + (lane() / 4) as usize * 8);
        l.codes[T] = ld_nc_v4(c);
        l.scales[T] = ld_nc_v2(s);
    });
    l
}

/// The f32 E4M3 scales of groups `2J`, `2J + 1` of one row from its 4 scale bytes.
#[inline(always)]
fn pair_scales<const J: usize>(w: u32) -> (f32, f32) {
    let h = e4m3x2_to_f16x2(w >> (16 * J));
    (f16_to_f32_bits(h), f16_to_f32_bits(h >> 16))
}

/// NVFP4 W4A4 gate+up with the activation fused: bf16 `act(gate·g0)·(up·g1)` out `[tokens][n]`.
/// Block: 128 rows × 64 tokens.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn nvfp4_mmq_gate_up_act(p: W4a4Params) {
    let smem = Smem::base();
    let (g, t) = (lane() / 4, lane() % 4);
    let rt = block_x() * WARPS + warp_id();
    let active = rt < p.n / 16;
    let k_tiles = p.k / TILE_K as u32;
    let chunks = p.k / CHUNK;
    let tok0 = block_y() * MMQ_TOKENS_PER_BLOCK;
    let w = [(p.w0, p.s0), (p.w1, p.s1)];
    let x = Act {
        xq: p.xq,
        xd: p.xs,
        tokens: p.tokens,
        k: p.k,
    };

    let mut acc = [[[0.0f32; 4]; 8]; 2];
    let mut cur = [ZERO; 2];
    if active {
        cur[0] = load_chunk(w[0].0, w[0].1, rt * k_tiles);
        cur[1] = load_chunk(w[1].0, w[1].1, rt * k_tiles);
    }
    stage_store(smem, stage_load(&x, tok0, 0));
    sync_threads();
    for c in 0..chunks {
        let last = c + 1 == chunks;
        let mut next = [ZERO; 2];
        let mut xn = Staged([[0; 4]; 5]);
        if !last {
            xn = stage_load(&x, tok0, c + 1);
            if active {
                let tile = rt * k_tiles + 4 * (c + 1);
                next[0] = load_chunk(w[0].0, w[0].1, tile);
                next[1] = load_chunk(w[1].0, w[1].1, tile);
            }
        }
        let buf = smem.add((c % 2) * BUF_BYTES);
        unroll4!(T, 0 => {
            unroll4!(J, 0 => {
                if J < 2 {
                    // Groups 2J and 2J+1 of tile T: A fragments and the rows' scales.
                    let mut a = [[[0u32; 2]; 2]; 2];
                    let mut sw = [[[0.0f32; 2]; 2]; 2];
                    for q in 0..2 {
                        for h in 0..2 {
                            let word = cur[q].codes[T][2 * J + h];
                            a[q][h] = [expand(word), expand(word >> 16)];
                        }
                        let (g0, g1) = pair_scales::<J>(cur[q].scales[T][0]);
                        let (h0, h1) = pair_scales::<J>(cur[q].scales[T][1]);
                        sw[q] = [[g0, h0], [g1, h1]];
                    }
                    unroll8!(F => {
                        let b = buf
                            .add((8 * F as u32 + g) * MMQ_SMEM_TOKEN_STRIDE + (T * 64 + J * 32) as u32 + t * 8)
                            .ld_v2();
                        let xs = buf
                            .add(QS_BYTES + (((2 * T + J) as u32) * MMQ_TOKENS_PER_BLOCK + 8 * F as u32 + 2 * t) * 8)
                            .ld_v4();
                        for h in 0..2 {
                            let (x0, x1) = (f32::from_bits(xs[h]), f32::from_bits(xs[2 + h]));
                            for q in 0..2 {
                                let dot = mma_s8_k16_s32(a[q][h], b[h], [0; 4]);
                                let [s_g, s_h] = sw[q][h];
                                let e = &mut acc[q][F];
                                e[0] = fma_f32(s_g * x0, dot[0] as f32, e[0]);
                                e[1] = fma_f32(s_g * x1, dot[1] as f32, e[1]);
                                e[2] = fma_f32(s_h * x0, dot[2] as f32, e[2]);
                                e[3] = fma_f32(s_h * x1, dot[3] as f32, e[3]);
                            }
                        }
                    });
                }
            });
        });
        if !last {
            stage_store(smem.add(((c + 1) % 2) * BUF_BYTES), xn);
        }
        sync_threads();
        cur = next;
    }
    if active {
        unroll8!(F => {
            for i in 0..4 {
                let tok = tok0 + 8 * F as u32 + 2 * t + (i as u32 & 1);
                let row = rt * 16 + g + if i >= 2 { 8 } else { 0 };
                let y0 = acc[0][F][i] * p.gscale0;
                let y1 = acc[1][F][i] * p.gscale1;
                let y = (if p.act == 2 { gelu_tanh(y0) } else { silu(y0) }) * y1;
                if tok < p.tokens {
                    *(p.out as *mut u16).add((tok * p.n + row) as usize) = f32_to_bf16(y);
                }
            }
        });
    }
}

/// bf16 `[tokens][k]` → NVFP4 per token (`formats::nvfp4_mmq`): one block per token; each thread
/// owns 32-value blocks `tid, tid + 256, …`: the token's amax (block reduction), then per 16
/// values the E4M3 scale and E2M1 codes, written as int8 doubled codes (32-blocks permuted by
/// `q8_pos`) and f32 factors `e4m3 · G / 4`. `Q8Params::ds` is the factor buffer, f32
/// `[tokens][k / 16]`. Shared memory: 32 bytes.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn quantize_nvfp4_act(p: Q8Params) {
    let smem = Smem::base();
    let tok = block_x();
    let tid = thread_x();
    let blocks = p.k / 32;
    let row = (p.x as *const u8).add(tok as usize * p.k as usize * 2);
    let load = |b: u32| {
        let src = row.add(b as usize * 64);
        [
            ld_nc_v4(src),
            ld_nc_v4(src.add(16)),
            ld_nc_v4(src.add(32)),
            ld_nc_v4(src.add(48)),
        ]
    };
    let val = |raw: &[[u32; 4]; 4], c: usize| {
        let w = raw[c / 8][(c % 8) / 2];
        bf16_to_f32((w >> (16 * (c % 2))) as u16)
    };
    let mut amax = 0.0f32;
    let mut b = tid;
    while b < blocks {
        let raw = load(b);
        unroll4!(A, 0 => {
            unroll8!(B => {
                amax = max_nan(amax, val(&raw, 8 * A + B).abs());
            });
        });
        b += NVFP4_ACT_THREADS;
    }
    amax = warp_max(amax);
    if lane() == 0 {
        smem.add(warp_id() * 4).st_f32(amax);
    }
    sync_threads();
    let mut tmax = 0.0f32;
    for wi in 0..NVFP4_ACT_THREADS / 32 {
        tmax = max_nan(tmax, smem.add(wi * 4).ld_f32());
    }
    let gs = act_global(tmax);
    let mut b = tid;
    while b < blocks {
        let raw = load(b);
        let mut words = [0u32; 8];
        let mut f = [0.0f32; 2];
        unroll4!(H, 0 => {
            if H < 2 {
                let mut gmax = 0.0f32;
                unroll8!(C => {
                    gmax = max_nan(gmax, val(&raw, 16 * H + C).abs());
                    gmax = max_nan(gmax, val(&raw, 16 * H + 8 + C).abs());
                });
                let (_, fac, inv) = act_scale(gmax, gs);
                f[H] = fac;
                unroll8!(C => {
                    unroll4!(D, 0 => {
                        if D < 2 {
                            const IDX: usize = 16 * H + 8 * D + C;
                            const POS: usize = q8_pos(IDX);
                            let q = DOUBLED[act_code(val(&raw, IDX), inv) as usize];
                            words[POS / 4] |= (q as u8 as u32) << (8 * (POS % 4));
                        }
                    });
                });
            }
        });
        let dst = (p.qs as *mut u8).add((tok * p.k + 32 * b) as usize);
        st_global_v4(dst, [words[0], words[1], words[2], words[3]]);
        st_global_v4(dst.add(16), [words[4], words[5], words[6], words[7]]);
        st_global_v2(
            (p.ds as *mut u8).add(((tok * blocks + b) * 8) as usize),
            [f[0].to_bits(), f[1].to_bits()],
        );
        b += NVFP4_ACT_THREADS;
    }
}
