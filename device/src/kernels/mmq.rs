//! Q4_K MMQ prefill GEMM: int8 activations × 4-bit Q4_K weights on integer tensor cores
//! (`mma.m16n8k32` s8, s32 accumulate), the Q4_K sub-block scales and mins applied per 32 columns
//! in f32.
//!
//! A block is 8 warps stacked along the rows and 64 tokens; a warp owns `RT` 16-row tiles per
//! projection (gate+up: 1 each, sharing every B fragment; down: 2) × 8 column fragments of 8
//! tokens. Per super-block (256 columns) each lane loads 64 bytes of codes and its two rows'
//! 16-byte ggml headers per tile straight from global memory (the MMQ layout is fragment-ordered,
//! `formats::q4k_mmq`), the next super-block's loads in flight while the current one is used.
//! Activations (int8 codes and f32 `(d, s)` per 32) are staged per super-block in shared memory,
//! double-buffered. Per sub-block `s` and fragment: one `mma` gives the exact integer dot
//! `Σ q_w·q_x` of 16 rows × 8 tokens, then `acc += (d·sc)·(dx·dot) − (dmin·m)·s_x` in f32.
use super::elementwise::gelu_tanh;
use super::gemv::silu;
use crate::dsl::*;
use crate::formats::q4k_mmq::{scale_min_words, TILE_CODE_BYTES, TILE_HEAD_BYTES, TILE_K};
use crate::params::{MmqParams, MMQ_SINGLE_RT, MMQ_SMEM_TOKEN_STRIDE, MMQ_TOKENS_PER_BLOCK};

const WARPS: u32 = 8;
const NF: usize = (MMQ_TOKENS_PER_BLOCK / 8) as usize;
pub(super) const QS_BYTES: u32 = MMQ_TOKENS_PER_BLOCK * MMQ_SMEM_TOKEN_STRIDE;
pub(super) const BUF_BYTES: u32 = QS_BYTES + MMQ_TOKENS_PER_BLOCK * 64;
const NIB: u32 = 0x0F0F_0F0F;

/// One lane's share of one tile: 16 code words (2 per sub-block), rows g and g+8's headers.
#[derive(Clone, Copy)]
struct Lane {
    codes: [[u32; 4]; 4],
    heads: [[u32; 4]; 2],
}

const ZERO: Lane = Lane {
    codes: [[0; 4]; 4],
    heads: [[0; 4]; 2],
};

#[inline(always)]
unsafe fn load_tile(codes: u64, heads: u64, tile: u32) -> Lane {
    let c = (codes as *const u8).add(tile as usize * TILE_CODE_BYTES + lane() as usize * 64);
    let h = (heads as *const u8).add(tile as usize * TILE_HEAD_BYTES + (lane() / 4) as usize * 16);
    Lane {
        codes: [
            ld_nc_v4(c),
            ld_nc_v4(c.add(16)),
            ld_nc_v4(c.add(32)),
            ld_nc_v4(c.add(48)),
        ],
        heads: [ld_nc_v4(h), ld_nc_v4(h.add(128))],
    }
}

/// The f32 `(d·sc, −dmin·m)` of sub-block `S` for one header (as 4 words).
#[inline(always)]
fn row_scales<const S: usize>(h: [u32; 4]) -> (f32, f32) {
    let (sc, m) = scale_min_words::<S>([h[1], h[2], h[3]]);
    (
        f16_to_f32_bits(h[0]) * sc as f32,
        -(f16_to_f32_bits(h[0] >> 16) * m as f32),
    )
}

/// This thread's share of one super-block of activations: 4 × 16 code bytes, 16 bytes of `(d, s)`.
#[derive(Clone, Copy)]
pub(super) struct Staged(pub(super) [[u32; 4]; 5]);

/// Where the staged activations come from: codes, f32 pairs, tokens, values per token.
pub(super) struct Act {
    pub xq: u64,
    pub xd: u64,
    pub tokens: u32,
    pub k: u32,
}

/// Loads this thread's share of super-block `c` (256 columns) of `tokens` activations from int8
/// codes `xq` `[tokens][k]` and f32 pairs `xd` `[tokens][k / 32][2]` (also the W4A4 arm's).
#[inline(always)]
pub(super) unsafe fn stage_load(p: &Act, tok0: u32, c: u32) -> Staged {
    let mut v = [[0u32; 4]; 5];
    let tid = thread_x();
    unroll4!(I, 0 => {
        let idx = tid + 256 * I as u32;
        let tok = tok0 + idx / 16;
        if tok < p.tokens {
            let at = (p.xq as *const u8).add((tok * p.k + c * TILE_K as u32 + (idx % 16) * 16) as usize);
            v[I] = ld_nc_v4(at);
        }
    });
    let tok = tok0 + tid / 4;
    if tok < p.tokens {
        let at = (p.xd as *const u8).add(((tok * (p.k / 32) + c * 8 + 2 * (tid % 4)) * 8) as usize);
        v[4] = ld_nc_v4(at);
    }
    Staged(v)
}

/// Stores a [`Staged`] share into one shared-memory buffer: codes at `token · stride`, pairs at
/// `QS_BYTES + (sub-block · 64 + token) · 8`.
#[inline(always)]
pub(super) unsafe fn stage_store(buf: Smem, s: Staged) {
    let tid = thread_x();
    unroll4!(I, 0 => {
        let idx = tid + 256 * I as u32;
        buf.add((idx / 16) * MMQ_SMEM_TOKEN_STRIDE + (idx % 16) * 16).st_v4(s.0[I]);
    });
    let (tn, sb) = (tid / 4, 2 * (tid % 4));
    let ds = buf.add(QS_BYTES);
    ds.add((sb * MMQ_TOKENS_PER_BLOCK + tn) * 8)
        .st_v2([s.0[4][0], s.0[4][1]]);
    ds.add(((sb + 1) * MMQ_TOKENS_PER_BLOCK + tn) * 8)
        .st_v2([s.0[4][2], s.0[4][3]]);
}

/// `P` projections (1, or 2 for gate+up) of `RT` row tiles per warp.
#[inline(always)]
unsafe fn mmq<const P: usize, const RT: usize>(p: &MmqParams) {
    let smem = Smem::base();
    let (g, t) = (lane() / 4, lane() % 4);
    let rt0 = (block_x() * WARPS + warp_id()) * RT as u32;
    let row_tiles = p.n / 16;
    let k_tiles = p.k / TILE_K as u32;
    let tok0 = block_y() * MMQ_TOKENS_PER_BLOCK;
    let active = |r: usize| rt0 + (r as u32) < row_tiles;
    let tile = |r: usize, c: u32| (rt0 + r as u32) * k_tiles + c;
    let w = [(p.w0, p.h0), (p.w1, p.h1), (0, 0), (0, 0)];
    let x = Act {
        xq: p.xq,
        xd: p.xd,
        tokens: p.tokens,
        k: p.k,
    };

    let mut acc = [[[[0.0f32; 4]; NF]; RT]; P];
    let mut cur = [[ZERO; RT]; P];
    unroll4!(R, 0 => {
        if R < RT && active(R) {
            unroll4!(Q, 0 => {
                if Q < P {
                    cur[Q][R] = load_tile(w[Q].0, w[Q].1, tile(R, 0));
                }
            });
        }
    });
    stage_store(smem, stage_load(&x, tok0, 0));
    sync_threads();
    for c in 0..k_tiles {
        let last = c + 1 == k_tiles;
        let mut next = [[ZERO; RT]; P];
        let mut xn = Staged([[0; 4]; 5]);
        if !last {
            xn = stage_load(&x, tok0, c + 1);
            unroll4!(R, 0 => {
                if R < RT && active(R) {
                    unroll4!(Q, 0 => {
                        if Q < P {
                            next[Q][R] = load_tile(w[Q].0, w[Q].1, tile(R, c + 1));
                        }
                    });
                }
            });
        }
        let buf = smem.add((c % 2) * BUF_BYTES);
        // (d, dmin) of rows g and g+8 are inside the header words; per sub-block, per tile:
        // A fragments and the two rows' f32 (a, −b).
        unroll8!(S => {
            let mut a = [[[0u32; 4]; RT]; P];
            let mut sc = [[[0.0f32; 4]; RT]; P];
            unroll4!(Q, 0 => {
                if Q < P {
                    unroll4!(R, 0 => {
                        if R < RT {
                            let l = &cur[Q][R];
                            let w0 = l.codes[S / 2][2 * (S % 2)];
                            let w1 = l.codes[S / 2][2 * (S % 2) + 1];
                            a[Q][R] = [w0 & NIB, w1 & NIB, (w0 >> 4) & NIB, (w1 >> 4) & NIB];
                            let (ag, bg) = row_scales::<S>(l.heads[0]);
                            let (ah, bh) = row_scales::<S>(l.heads[1]);
                            sc[Q][R] = [ag, bg, ah, bh];
                        }
                    });
                }
            });
            unroll8!(F => {
                let b = buf
                    .add((8 * F as u32 + g) * MMQ_SMEM_TOKEN_STRIDE + S as u32 * 32 + t * 8)
                    .ld_v2();
                let ds = buf
                    .add(QS_BYTES + (S as u32 * MMQ_TOKENS_PER_BLOCK + 8 * F as u32 + 2 * t) * 8)
                    .ld_v4();
                let (d0, s0, d1, s1) = (
                    f32::from_bits(ds[0]),
                    f32::from_bits(ds[1]),
                    f32::from_bits(ds[2]),
                    f32::from_bits(ds[3]),
                );
                unroll4!(Q, 0 => {
                    if Q < P {
                        unroll4!(R, 0 => {
                            if R < RT {
                                let dot = mma_s8_s32(a[Q][R], b, [0; 4]);
                                let [ag, bg, ah, bh] = sc[Q][R];
                                let e = &mut acc[Q][R][F];
                                e[0] = fma_f32(bg, s0, fma_f32(ag, dot[0] as f32 * d0, e[0]));
                                e[1] = fma_f32(bg, s1, fma_f32(ag, dot[1] as f32 * d1, e[1]));
                                e[2] = fma_f32(bh, s0, fma_f32(ah, dot[2] as f32 * d0, e[2]));
                                e[3] = fma_f32(bh, s1, fma_f32(ah, dot[3] as f32 * d1, e[3]));
                            }
                        });
                    }
                });
            });
        });
        if !last {
            stage_store(smem.add(((c + 1) % 2) * BUF_BYTES), xn);
        }
        sync_threads();
        cur = next;
    }
    unroll4!(R, 0 => {
        if R < RT && active(R) {
            unroll8!(F => {
                for i in 0..4 {
                    let tok = tok0 + 8 * F as u32 + 2 * t + (i as u32 & 1);
                    let row = (rt0 + R as u32) * 16 + g + if i >= 2 { 8 } else { 0 };
                    let y0 = acc[0][R][F][i];
                    let y = if P == 2 {
                        let y1 = acc[P - 1][R][F][i];
                        (if p.act == 2 { gelu_tanh(y0) } else { silu(y0) }) * y1
                    } else {
                        y0
                    };
                    if tok < p.tokens {
                        *(p.out as *mut u16).add((tok * p.n + row) as usize) = f32_to_bf16(y);
                    }
                }
            });
        }
    });
}

/// Q4_K MMQ gate+up with the activation fused: bf16 `act(gate)·up` out `[tokens][n]`. Block:
/// 128 rows × 64 tokens.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn q4k_mmq_gate_up_act(p: MmqParams) {
    mmq::<2, 1>(&p)
}

/// Q4_K MMQ single projection (down): bf16 out `[tokens][n]`. Block: 256 rows × 64 tokens.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn q4k_mmq(p: MmqParams) {
    mmq::<1, { MMQ_SINGLE_RT as usize }>(&p)
}
