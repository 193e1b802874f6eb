//! NVFP4 prefill GEMM on bf16 tensor cores: `Y[t] = W·X[t]` for many tokens.
//!
//! A block owns 128 rows × 64 tokens; each warp one 16-row tile × 64 tokens (eight `m16n8k16`
//! column fragments). Weights come straight from global memory already in A-fragment order
//! (the tiled layout) and are dequantized once per 16 columns into bf16 fragments that serve all
//! 64 tokens. Activations (bf16, no rescaling needed) are staged per 64-column chunk in shared
//! memory in B-fragment order, double-buffered: the next chunk's global loads are in flight
//! while the current one is multiplied. The dual kernel (gate+up) applies the activation in its
//! epilogue and writes `act(gate)·up` as bf16, the down GEMM's input.
use super::elementwise::gelu_tanh;
use super::gemv_nvfp4::{fragments, silu};
use crate::dsl::*;
use crate::formats::nvfp4::{TILE_CODE_BYTES, TILE_K, TILE_ROWS, TILE_SCALE_BYTES};
use crate::params::{GemmParams, GEMM_TOKENS_PER_BLOCK};

const WARPS: u32 = 8;

/// Repeats `$body` with `$f` bound to the constants 0..8, so the accumulator arrays are only
/// ever indexed by constants and stay in registers (a loop LLVM declines to unroll would put
/// them in local memory).
macro_rules! unroll8 {
    ($f:ident => $body:block) => {{
        unroll4!($f, 0 => $body);
        unroll4!($f, 4 => $body);
    }};
}

/// Repeats `$body` with `$f` bound to the constants `$base..$base + 4`.
macro_rules! unroll4 {
    ($f:ident, $base:literal => $body:block) => {{
        {
            const $f: usize = $base;
            $body
        }
        {
            const $f: usize = $base + 1;
            $body
        }
        {
            const $f: usize = $base + 2;
            $body
        }
        {
            const $f: usize = $base + 3;
            $body
        }
    }};
}
const BUF_BYTES: u32 = GEMM_TOKENS_PER_BLOCK * TILE_K as u32 * 2;
const FRAGS: usize = (GEMM_TOKENS_PER_BLOCK / 8) as usize;

/// This warp's weights for one chunk: code words and scale words.
#[derive(Clone, Copy)]
struct Chunk {
    w: [u32; 4],
    s: [u32; 2],
}

#[inline(always)]
unsafe fn load_chunk(codes: u64, scales: u64, tile: usize) -> Chunk {
    let (lane, g) = (lane() as usize, lane() as usize / 4);
    Chunk {
        w: ld_nc_v4((codes as *const u8).add(tile * TILE_CODE_BYTES + lane * 16)),
        s: ld_nc_v2((scales as *const u8).add(tile * TILE_SCALE_BYTES + g * 8)),
    }
}

/// The bf16 A-fragments of step `j` of a chunk.
#[inline(always)]
fn bf16_fragments(c: &Chunk, j: u32) -> [u32; 4] {
    let f = fragments(c.w[j as usize], c.s, j);
    [
        f16x2_to_bf16x2(f[0]),
        f16x2_to_bf16x2(f[1]),
        f16x2_to_bf16x2(f[2]),
        f16x2_to_bf16x2(f[3]),
    ]
}

/// This thread's 16 activations of chunk `c` (8 bf16 pairs), zeros past the last token.
#[inline(always)]
unsafe fn load_x(p: &GemmParams, tok: u32, part: u32, c: u32) -> [u32; 8] {
    if tok < p.tokens {
        let at = (p.x as *const u8).add(((tok * p.k + c * TILE_K as u32 + part * 16) * 2) as usize);
        let a = ld_nc_v4(at);
        let b = ld_nc_v4(at.add(16));
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    } else {
        [0; 8]
    }
}

/// Stores the pairs from [`load_x`] in B-fragment order: token `tn`'s 64 columns become 32 words
/// `[tq][q]`, `q` = 2·step + (second half of the step).
#[inline(always)]
unsafe fn store_x(buf: Smem, tn: u32, part: u32, v: [u32; 8]) {
    for (i, &w) in v.iter().enumerate() {
        let i = i as u32;
        let word = (tn * 4 + i % 4) * 8 + 2 * part + i / 4;
        buf.add(word * 4).st_u32(w);
    }
}

#[inline(always)]
unsafe fn gemm<const DUAL: bool>(p: &GemmParams) {
    let smem = Smem::base();
    let (g, tq) = (lane() / 4, lane() % 4);
    let rt = block_x() * WARPS + warp_id();
    let active = rt < p.n / TILE_ROWS as u32;
    let k_tiles = p.k / TILE_K as u32;
    let tok0 = block_y() * GEMM_TOKENS_PER_BLOCK;
    let (tn, part) = (thread_x() / 4, thread_x() % 4);
    let tile0 = (rt * k_tiles) as usize;

    let mut acc0 = [[0.0f32; 4]; FRAGS];
    let mut acc1 = [[0.0f32; 4]; FRAGS];
    let zero = Chunk {
        w: [0; 4],
        s: [0; 2],
    };
    let mut a0 = if active {
        load_chunk(p.w0, p.s0, tile0)
    } else {
        zero
    };
    let mut a1 = if DUAL && active {
        load_chunk(p.w1, p.s1, tile0)
    } else {
        zero
    };
    store_x(smem, tn, part, load_x(p, tok0 + tn, part, 0));
    sync_threads();
    for c in 0..k_tiles {
        let last = c + 1 == k_tiles;
        let (mut n0, mut n1, mut xn) = (zero, zero, [0u32; 8]);
        if !last {
            xn = load_x(p, tok0 + tn, part, c + 1);
            if active {
                n0 = load_chunk(p.w0, p.s0, tile0 + c as usize + 1);
                if DUAL {
                    n1 = load_chunk(p.w1, p.s1, tile0 + c as usize + 1);
                }
            }
        }
        let buf = smem.add((c % 2) * BUF_BYTES);
        unroll4!(J, 0 => {
            let j = J as u32;
            let f0 = bf16_fragments(&a0, j);
            let f1 = if DUAL { bf16_fragments(&a1, j) } else { [0; 4] };
            unroll8!(F => {
                let b = buf.add((((8 * F as u32 + g) * 4 + tq) * 8 + 2 * j) * 4).ld_v2();
                acc0[F] = mma_bf16_f32(f0, b, acc0[F]);
                if DUAL {
                    acc1[F] = mma_bf16_f32(f1, b, acc1[F]);
                }
            });
        });
        if !last {
            store_x(smem.add(((c + 1) % 2) * BUF_BYTES), tn, part, xn);
        }
        sync_threads();
        a0 = n0;
        a1 = n1;
    }
    if !active {
        return;
    }
    unroll8!(F => {
        for i in 0..4 {
            let tok = tok0 + 8 * F as u32 + 2 * tq + (i as u32 & 1);
            let row = rt * TILE_ROWS as u32 + g + if i >= 2 { 8 } else { 0 };
            let y0 = acc0[F][i] * (64.0 * p.gscale0);
            let y = if DUAL {
                let y1 = acc1[F][i] * (64.0 * p.gscale1);
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

/// Prefill gate+up over the `_t` copies with the activation fused: bf16 `act(g)·u` out.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemm_nvfp4_t_gate_up_act(p: GemmParams) {
    gemm::<true>(&p)
}

/// Prefill down projection over the `_t` copies: bf16 out.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemm_nvfp4_t_down(p: GemmParams) {
    gemm::<false>(&p)
}
