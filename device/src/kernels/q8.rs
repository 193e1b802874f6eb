//! The MMQ arm's quantization kernels: activations bf16 → int8 per 32 (every prefill call), and
//! NVFP4 → Q4_K requantization of weights (once, at load). Both use the shared math of
//! `formats::q4k_mmq`, as does the CPU reference, so CPU and GPU produce the same bytes.
use crate::dsl::*;
use crate::formats::q4k_mmq::{
    self as fmt, code_pos, fit_sub_block, q4_code, q8_code, q8_scale, quant6, super_scales,
    TILE_CODE_BYTES, TILE_HEAD_BYTES, TILE_K,
};
use crate::formats::{nvfp4, q4k};
use crate::params::{Q8Params, RequantParams, Q8_THREADS};

/// bf16 `[tokens][k]` → int8 codes (each 32-block permuted by `q8_pos`) and f32 `(d, s)`, one
/// thread per 32 values.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn quantize_q8_32(p: Q8Params) {
    let blk = block_x() * Q8_THREADS + thread_x();
    if blk >= p.tokens * (p.k / 32) {
        return;
    }
    let src = (p.x as *const u8).add(blk as usize * 64);
    let raw = [
        ld_nc_v4(src),
        ld_nc_v4(src.add(16)),
        ld_nc_v4(src.add(32)),
        ld_nc_v4(src.add(48)),
    ];
    let v = |c: usize| {
        let w = raw[c / 8][(c % 8) / 2];
        bf16_to_f32((w >> (16 * (c % 2))) as u16)
    };
    // Constant indices only (the unrolled loops keep `raw` and `words` in registers).
    let mut amax = 0.0f32;
    unroll4!(A, 0 => {
        unroll8!(B => {
            amax = max_nan(amax, v(8 * A + B).abs());
        });
    });
    let (d, inv) = q8_scale(amax);
    let mut words = [0u32; 8];
    let mut sum = 0i32;
    unroll4!(A, 0 => {
        unroll8!(B => {
            const POS: usize = fmt::q8_pos(8 * A + B);
            let q = q8_code(v(8 * A + B), inv);
            sum += q;
            words[POS / 4] |= ((q as u32) & 0xFF) << (8 * (POS % 4));
        });
    });
    let dst = (p.qs as *mut u8).add(blk as usize * 32);
    st_global_v4(dst, [words[0], words[1], words[2], words[3]]);
    st_global_v4(dst.add(16), [words[4], words[5], words[6], words[7]]);
    st_global_v2(
        (p.ds as *mut u8).add(blk as usize * 8),
        [d.to_bits(), (d * sum as f32).to_bits()],
    );
}

const VALUES_AT: u32 = 0;
const FITS_AT: u32 = Q8_THREADS * 32 * 4;
const SCALES_AT: u32 = FITS_AT + Q8_THREADS * 8;

/// NVFP4 (tiled) → Q4_K (MMQ layout), one thread per 32-value sub-block: the thread decodes its
/// values into shared memory, fits `(scale, min)` (`fit_sub_block`); the 8 threads of a
/// super-block then take `d`, `dmin` from the largest of theirs, each quantizes its scale and min
/// to 6 bits and writes its codes, and the first writes the 16-byte header.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn requant_nvfp4_q4k(p: RequantParams) {
    let smem = Smem::base();
    let tid = thread_x();
    let id = block_x() * Q8_THREADS + tid;
    let (rows, cols) = (p.rows as usize, p.cols as usize);
    let sbs = (cols / 32) as u32;
    let live = id < p.rows * sbs;
    let (row, sbg) = ((id / sbs) as usize, (id % sbs) as usize);
    let k_tiles = cols / nvfp4::TILE_K;
    let tiles = rows * k_tiles;
    let codes = core::slice::from_raw_parts(p.codes as *const u8, tiles * nvfp4::TILE_CODE_BYTES);
    let scales =
        core::slice::from_raw_parts(p.scales as *const u8, tiles * nvfp4::TILE_SCALE_BYTES);
    let val = |i: usize| {
        smem.add(VALUES_AT + (i as u32 * Q8_THREADS + tid) * 4)
            .ld_f32()
    };
    if live {
        for i in 0..32 {
            let v = nvfp4::tiled_value(codes, scales, p.global, k_tiles, row, sbg * 32 + i);
            smem.add(VALUES_AT + (i as u32 * Q8_THREADS + tid) * 4)
                .st_f32(v);
        }
    }
    let (a, b) = if live { fit_sub_block(val) } else { (0.0, 0.0) };
    smem.add(FITS_AT + tid * 8).st_f32(a);
    smem.add(FITS_AT + tid * 8 + 4).st_f32(b);
    sync_threads();
    let first = tid & !7;
    let (mut amax, mut mmax) = (0.0f32, 0.0f32);
    for j in 0..8 {
        amax = amax.max(smem.add(FITS_AT + (first + j) * 8).ld_f32());
        mmax = mmax.max(smem.add(FITS_AT + (first + j) * 8 + 4).ld_f32());
    }
    let (dbits, mbits) = super_scales(amax, mmax);
    let (df, mf) = (q4k::f16_to_f32(dbits), q4k::f16_to_f32(mbits));
    let (sc, m) = (quant6(a, df), quant6(b, mf));
    smem.add(SCALES_AT + tid * 4).st_u32(sc | (m << 8));
    let (qa, qb) = (df * sc as f32, mf * m as f32);
    let (lr, kt, s) = (row % 16, sbg / 8, sbg % 8);
    let tile = (row / 16) * (cols / TILE_K) + kt;
    if live {
        for t in 0..4 {
            let mut word = 0u32;
            for i in 0..4 {
                let lo = q4_code(val(4 * t + i), qa, qb);
                let hi = q4_code(val(16 + 4 * t + i), qa, qb);
                word |= (lo | (hi << 4)) << (8 * i);
            }
            let (off, _) = code_pos(lr, s * 32 + 4 * t);
            *((p.dst_codes as *mut u8).add(tile * TILE_CODE_BYTES + off) as *mut u32) = word;
        }
    }
    sync_threads();
    if live && s == 0 {
        let mut sc8 = [0u8; 8];
        let mut mn8 = [0u8; 8];
        for j in 0..8 {
            let w = smem.add(SCALES_AT + (tid + j as u32) * 4).ld_u32();
            sc8[j] = w as u8;
            mn8[j] = (w >> 8) as u8;
        }
        let packed = q4k::pack_scales(&sc8, &mn8);
        let word =
            |b: usize| u32::from_le_bytes([packed[b], packed[b + 1], packed[b + 2], packed[b + 3]]);
        let head = (p.dst_heads as *mut u8).add(tile * TILE_HEAD_BYTES + fmt::head_pos(lr));
        st_global_v4(
            head,
            [
                dbits as u32 | ((mbits as u32) << 16),
                word(0),
                word(4),
                word(8),
            ],
        );
    }
}
