//! Warp-level tensor-core products (`mma.sync`).
use core::arch::asm;

/// `D = A·B + C` for one `m16n8k16` tile: A 16×16 f16 (row), B 16×8 f16 (col), C/D f32.
/// Fragment layouts are the PTX ISA's: lane `g = lane/4`, `t = lane%4`; `a[0]` = row g cols
/// 2t..2t+1, `a[1]` = row g+8, `a[2]` = row g cols 2t+8.., `a[3]` = row g+8 cols 2t+8..;
/// `b[0]` = rows 2t..2t+1 col g, `b[1]` = rows 2t+8..; `c[0..2]` = row g cols 2t..2t+1,
/// `c[2..4]` = row g+8.
#[inline(always)]
pub fn mma_f16_f32(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
    let d: [f32; 4];
    let (d0, d1, d2, d3);
    // SAFETY: a warp-synchronous tensor-core op; callers run it with the full warp converged.
    // Not `pure`: a side-effecting asm is never sunk into a branch that only some lanes take.
    unsafe {
        asm!(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{c0}, {c1}, {c2}, {c3}}};",
            d0 = out(reg32) d0, d1 = out(reg32) d1, d2 = out(reg32) d2, d3 = out(reg32) d3,
            a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
            b0 = in(reg32) b[0], b1 = in(reg32) b[1],
            c0 = in(reg32) c[0], c1 = in(reg32) c[1], c2 = in(reg32) c[2], c3 = in(reg32) c[3],
            options(nostack, nomem)
        );
    }
    d = [d0, d1, d2, d3];
    d
}

/// `D = A·B + C` for one `m16n8k16` tile with bf16 A and B (same fragment layouts as
/// [`mma_f16_f32`]).
#[inline(always)]
pub fn mma_bf16_f32(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
    let (d0, d1, d2, d3);
    // SAFETY: as mma_f16_f32; not `pure`, so never sunk into a divergent branch.
    unsafe {
        asm!(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{c0}, {c1}, {c2}, {c3}}};",
            d0 = out(reg32) d0, d1 = out(reg32) d1, d2 = out(reg32) d2, d3 = out(reg32) d3,
            a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
            b0 = in(reg32) b[0], b1 = in(reg32) b[1],
            c0 = in(reg32) c[0], c1 = in(reg32) c[1], c2 = in(reg32) c[2], c3 = in(reg32) c[3],
            options(nostack, nomem)
        );
    }
    [d0, d1, d2, d3]
}

/// `D = A·B + C` for one `m16n8k32` tile of signed 8-bit integers, s32 accumulate:
/// `mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32`. Fragment layouts (PTX ISA), lane `g =
/// lane/4`, `t = lane%4`, four int8 per register (byte `i` = element `i`): `a[0]` = row g, k
/// `4t+i`; `a[1]` = row g+8, k `4t+i`; `a[2]` = row g, k `16+4t+i`; `a[3]` = row g+8, k
/// `16+4t+i`; `b[0]` = k `4t+i`, column g; `b[1]` = k `16+4t+i`, column g; `c[0..2]` = row g,
/// columns 2t, 2t+1; `c[2..4]` = row g+8. Exact (integer) products and sums.
#[inline(always)]
pub fn mma_s8_s32(a: [u32; 4], b: [u32; 2], c: [i32; 4]) -> [i32; 4] {
    let (d0, d1, d2, d3);
    // SAFETY: as mma_f16_f32; not `pure`, so never sunk into a divergent branch.
    unsafe {
        asm!(
            "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{c0}, {c1}, {c2}, {c3}}};",
            d0 = out(reg32) d0, d1 = out(reg32) d1, d2 = out(reg32) d2, d3 = out(reg32) d3,
            a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
            b0 = in(reg32) b[0], b1 = in(reg32) b[1],
            c0 = in(reg32) c[0], c1 = in(reg32) c[1], c2 = in(reg32) c[2], c3 = in(reg32) c[3],
            options(nostack, nomem)
        );
    }
    [d0, d1, d2, d3]
}

/// `D = A·B + C` for one `m16n8k16` tile of signed 8-bit integers, s32 accumulate:
/// `mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32`. Fragment layouts (PTX ISA), lane `g =
/// lane/4`, `t = lane%4`, four int8 per register (byte `i` = element `i`): `a[0]` = row g, k
/// `4t+i`; `a[1]` = row g+8, k `4t+i`; `b` = k `4t+i`, column g; `c[0..2]` = row g, columns
/// 2t, 2t+1; `c[2..4]` = row g+8. Exact (integer) products and sums.
#[inline(always)]
pub fn mma_s8_k16_s32(a: [u32; 2], b: u32, c: [i32; 4]) -> [i32; 4] {
    let (d0, d1, d2, d3);
    // SAFETY: as mma_f16_f32; not `pure`, so never sunk into a divergent branch.
    unsafe {
        asm!(
            "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}}}, {{{b0}}}, {{{c0}, {c1}, {c2}, {c3}}};",
            d0 = out(reg32) d0, d1 = out(reg32) d1, d2 = out(reg32) d2, d3 = out(reg32) d3,
            a0 = in(reg32) a[0], a1 = in(reg32) a[1],
            b0 = in(reg32) b,
            c0 = in(reg32) c[0], c1 = in(reg32) c[1], c2 = in(reg32) c[2], c3 = in(reg32) c[3],
            options(nostack, nomem)
        );
    }
    [d0, d1, d2, d3]
}
