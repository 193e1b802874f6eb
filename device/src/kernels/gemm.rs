//! Prefill GEMM on bf16 tensor cores: `Y[t] = W·X[t]` for many tokens, generic over the tiled
//! weight format ([`Tiles`]).
//!
//! Each warp owns `RT` 16-row tiles × `8·NF` tokens (`NF` `m16n8k16` column fragments), so every
//! B fragment read from shared memory feeds `RT` (×2 for gate+up) products; a block is 8 warps
//! stacked along the rows. Weights come straight from global memory already in A-fragment order
//! (the tiled layout) and are dequantized once per 16 columns into bf16 fragments that serve all
//! 64 tokens. Activations (bf16, no rescaling needed) are staged per 64-column chunk in shared
//! memory in B-fragment order, double-buffered: the next chunk's global loads are in flight
//! while the current one is multiplied. The dual kernel (gate+up) applies the activation in its
//! epilogue and writes `act(gate)·up` as bf16, the down GEMM's input.
use super::elementwise::gelu_tanh;
use super::gemv::silu;
use super::tiles::{Nvfp4, Tiles};
use crate::dsl::*;
use crate::formats::nvfp4::{TILE_K, TILE_ROWS};
use crate::params::{
    GemmParams, GEMM_DUAL_NF, GEMM_ROWS_PER_BLOCK, GEMM_RT, GEMM_SINGLE_NF, GEMM_TOKEN_WORDS,
};

const WARPS: u32 = 8;

/// The bf16 A-fragments of step `j` of a chunk: the f16 ones converted (exact for NVFP4 and F16,
/// whose values bf16 holds; FP8 and Q2 round their f16-scaled values to bf16, ≤ 2^-9 relative).
#[inline(always)]
fn bf16_fragments<T: Tiles>(l: &T::Lane, j: u32) -> [u32; 4] {
    let f = T::fragments(l, j);
    [
        f16x2_to_bf16x2(f[0]),
        f16x2_to_bf16x2(f[1]),
        f16x2_to_bf16x2(f[2]),
        f16x2_to_bf16x2(f[3]),
    ]
}

/// Who stages what: with `8·NF` tokens per block, `256 / (8·NF)` threads share a token row of a
/// chunk, each loading `NF / 4` 16-byte vectors (8 bf16 each).
struct Stager {
    tn: u32,
    col0: u32,
}

impl Stager {
    #[inline(always)]
    fn new<const NF: usize>() -> Self {
        let per_token = 256 / (8 * NF as u32);
        let (tn, part) = (thread_x() / per_token, thread_x() % per_token);
        Stager {
            tn,
            col0: part * 2 * NF as u32,
        }
    }

    /// This thread's activations of chunk `c` (bf16 pairs), zeros past the last token.
    #[inline(always)]
    unsafe fn load<const NF: usize>(&self, p: &GemmParams, tok0: u32, c: u32) -> [[u32; 4]; 2] {
        let tok = tok0 + self.tn;
        let mut v = [[0u32; 4]; 2];
        if tok < p.tokens {
            let at =
                (p.x as *const u8).add(((tok * p.k + c * TILE_K as u32 + self.col0) * 2) as usize);
            v[0] = ld_nc_v4(at);
            if NF == 8 {
                v[1] = ld_nc_v4(at.add(16));
            }
        }
        v
    }

    /// Stores the pairs from [`Stager::load`] in B-fragment order: a token's 64 columns become 32
    /// words `[tq][q]`, `q` = 2·step + (second half of the step), at a token stride of
    /// [`GEMM_TOKEN_WORDS`] words.
    #[inline(always)]
    unsafe fn store<const NF: usize>(&self, buf: Smem, v: [[u32; 4]; 2]) {
        unroll8!(I => {
            if I < NF {
                let kk = self.col0 + 2 * I as u32;
                let (j, r) = (kk / 16, kk % 16);
                let word = self.tn * GEMM_TOKEN_WORDS + ((r % 8) / 2) * 8 + 2 * j + r / 8;
                buf.add(word * 4).st_u32(v[I / 4][I % 4]);
            }
        });
    }
}

#[inline(always)]
unsafe fn gemm<T: Tiles, const DUAL: bool, const NF: usize, const LORA: bool, const SPLIT: bool>(
    p: &GemmParams,
) {
    const RT: usize = GEMM_RT as usize;
    let smem = Smem::base();
    let buf_bytes = 8 * NF as u32 * GEMM_TOKEN_WORDS * 4;
    let (g, tq) = (lane() / 4, lane() % 4);
    let rt0 = (block_x() * WARPS + warp_id()) * RT as u32;
    let row_tiles = p.n / TILE_ROWS as u32;
    let k_tiles = p.k / TILE_K as u32;
    let tok0 = block_y() * 8 * NF as u32;
    // This block's chunks: all of K, or its split's share (the `_splitk` entry points only:
    // single projection, no LoRA; the others keep the code, registers and speed they had).
    let split = SPLIT && !DUAL && !LORA && p.splits > 1;
    let (c_begin, c_end) = if split {
        let c0 = block_z() * p.chunks_per_split;
        (c0, (c0 + p.chunks_per_split).min(k_tiles))
    } else {
        (0, k_tiles)
    };
    let stager = Stager::new::<NF>();
    let active = |r: usize| rt0 + (r as u32) < row_tiles;
    let tile0 = |r: usize| ((rt0 + r as u32) * k_tiles) as usize;

    let mut acc0 = [[[0.0f32; 4]; 8]; RT];
    let mut acc1 = [[[0.0f32; 4]; 8]; RT];
    let mut a0 = [T::ZERO; RT];
    let mut a1 = [T::ZERO; RT];
    unroll4!(R, 0 => {
        if R < RT && active(R) {
            a0[R] = T::load(p.w0, p.s0, tile0(R) + c_begin as usize);
            if DUAL {
                a1[R] = T::load(p.w1, p.s1, tile0(R) + c_begin as usize);
            }
        }
    });
    stager.store::<NF>(smem, stager.load::<NF>(p, tok0, c_begin));
    sync_threads();
    for c in c_begin..c_end {
        let last = c + 1 == c_end;
        let (mut n0, mut n1, mut xn) = ([T::ZERO; RT], [T::ZERO; RT], [[0u32; 4]; 2]);
        if !last {
            xn = stager.load::<NF>(p, tok0, c + 1);
            unroll4!(R, 0 => {
                if R < RT && active(R) {
                    n0[R] = T::load(p.w0, p.s0, tile0(R) + c as usize + 1);
                    if DUAL {
                        n1[R] = T::load(p.w1, p.s1, tile0(R) + c as usize + 1);
                    }
                }
            });
        }
        let buf = smem.add(((c - c_begin) % 2) * buf_bytes);
        unroll4!(J, 0 => {
            let j = J as u32;
            let mut f0 = [[0u32; 4]; RT];
            let mut f1 = [[0u32; 4]; RT];
            unroll4!(R, 0 => {
                if R < RT {
                    f0[R] = bf16_fragments::<T>(&a0[R], j);
                    if DUAL {
                        f1[R] = bf16_fragments::<T>(&a1[R], j);
                    }
                }
            });
            unroll8!(F => {
                if F < NF {
                    let word = (8 * F as u32 + g) * GEMM_TOKEN_WORDS + tq * 8 + 2 * j;
                    let b = buf.add(word * 4).ld_v2();
                    unroll4!(R, 0 => {
                        if R < RT {
                            acc0[R][F] = mma_bf16_f32(f0[R], b, acc0[R][F]);
                            if DUAL {
                                acc1[R][F] = mma_bf16_f32(f1[R], b, acc1[R][F]);
                            }
                        }
                    });
                }
            });
        });
        if !last {
            stager.store::<NF>(smem.add(((c + 1 - c_begin) % 2) * buf_bytes), xn);
        }
        sync_threads();
        a0 = n0;
        a1 = n1;
    }
    // LoRA (the `_lora` entry points only, so the others keep their registers): scale the
    // accumulators now and add the `B·ax` deltas (before the activation).
    let (mut s0, mut s1) = (T::FACTOR * p.gscale0, T::FACTOR * p.gscale1);
    if LORA && p.lora_rank != 0 {
        let at = (rt0, row_tiles, tok0);
        super::lora::gemm_delta::<RT, NF>(p, 0, at, &mut acc0, s0);
        if DUAL {
            super::lora::gemm_delta::<RT, NF>(p, 1, at, &mut acc1, s1);
        }
        (s0, s1) = (1.0, 1.0);
    }
    unroll4!(R, 0 => {
        if R < RT && active(R) {
            unroll8!(F => {
                if F < NF {
                    for i in 0..4 {
                        let tok = tok0 + 8 * F as u32 + 2 * tq + (i as u32 & 1);
                        let row = (rt0 + R as u32) * TILE_ROWS as u32 + g + if i >= 2 { 8 } else { 0 };
                        let y0 = acc0[R][F][i] * s0;
                        let y = if DUAL {
                            let y1 = acc1[R][F][i] * s1;
                            (if p.act == 2 { gelu_tanh(y0) } else { silu(y0) }) * y1
                        } else {
                            y0
                        };
                        if tok < p.tokens {
                            if split {
                                let at = (block_z() * p.tokens + tok) * p.n + row;
                                *(p.ws as *mut f32).add(at as usize) = y;
                            } else {
                                *(p.out as *mut u16).add((tok * p.n + row) as usize) =
                                    f32_to_bf16(y);
                            }
                        }
                    }
                }
            });
        }
    });
    if split {
        reduce_splits(p, GEMM_ROWS_PER_BLOCK, 8 * NF as u32);
    }
}

/// The last block of a split-K tile (`rows` × `tokens` outputs) to finish sums the tile's
/// partials in split order and writes the bf16 output (the others return). The counter of the
/// tile is back at zero after.
#[inline(always)]
pub(super) unsafe fn reduce_splits(p: &GemmParams, rows: u32, tokens: u32) {
    let tile = block_y() * grid_x() + block_x();
    let counter = (p.counters as *mut u32).add(tile as usize);
    // The staging buffers are free: the main loop ended on a barrier.
    if !last_block_to_finish(counter, p.splits, Smem::base()) {
        return;
    }
    let (row0, tok0) = (block_x() * rows, block_y() * tokens);
    let mut i = thread_x();
    while i < rows * tokens {
        let (row, tok) = (row0 + i % rows, tok0 + i / rows);
        if row < p.n && tok < p.tokens {
            let mut sum = 0.0f32;
            for s in 0..p.splits {
                sum += ld_cg_f32(
                    (p.ws as *const f32).add(((s * p.tokens + tok) * p.n + row) as usize),
                );
            }
            *(p.out as *mut u16).add((tok * p.n + row) as usize) = f32_to_bf16(sum);
        }
        i += 256;
    }
}

/// `gemm_nvfp4_t_gate_up_act` with LoRA deltas: `scale·B·ax` added to gate and up before the
/// activation (`lora_*` fields of the parameter block).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemm_nvfp4_t_lora_gate_up_act(p: GemmParams) {
    gemm::<Nvfp4, true, { GEMM_DUAL_NF as usize }, true, false>(&p)
}

/// `gemm_nvfp4_t_down` with the LoRA delta of down.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gemm_nvfp4_t_lora_down(p: GemmParams) {
    gemm::<Nvfp4, false, { GEMM_SINGLE_NF as usize }, true, false>(&p)
}
