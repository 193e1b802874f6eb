//! Float helpers: fast exp2, bf16/f16 conversions, packed f16 arithmetic.
use core::arch::asm;

/// `2^x` with `ex2.approx.ftz.f32` (max error 2 ulp over the full range).
#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("ex2.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(nostack, pure, nomem))
    };
    r
}

/// `1/x` with `rcp.approx.ftz.f32` (max error 1 ulp; `1/±inf = ±0`, NaN stays NaN).
#[inline(always)]
pub fn rcp(x: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("rcp.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(nostack, pure, nomem))
    };
    r
}

/// `e^x`.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    exp2(x * core::f32::consts::LOG2_E)
}

/// Maximum that returns NaN when either side is NaN.
#[inline(always)]
pub fn max_nan(a: f32, b: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("max.NaN.f32 {r}, {a}, {b};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, options(nostack, pure, nomem))
    };
    r
}

/// bf16 bits to f32 (exact).
#[inline(always)]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// f32 to bf16 bits, round to nearest even (NaN stays NaN).
#[inline(always)]
pub fn f32_to_bf16(v: f32) -> u16 {
    let r: u16;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("cvt.rn.bf16.f32 {r}, {v};", r = out(reg16) r, v = in(reg32) v, options(nostack, pure, nomem))
    };
    r
}

/// Two f32 to packed f16x2 (`lo` in the low half), round to nearest even.
#[inline(always)]
pub fn pack_f16x2(lo: f32, hi: f32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic. cvt puts its first source in the upper half.
    unsafe {
        asm!("cvt.rn.f16x2.f32 {r}, {h}, {l};", r = out(reg32) r, h = in(reg32) hi, l = in(reg32) lo, options(nostack, pure, nomem))
    };
    r
}

/// Two f32 to packed bf16x2 (`lo` in the low half), round to nearest even.
#[inline(always)]
pub fn pack_bf16x2(lo: f32, hi: f32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic. cvt puts its first source in the upper half.
    unsafe {
        asm!("cvt.rn.bf16x2.f32 {r}, {h}, {l};", r = out(reg32) r, h = in(reg32) hi, l = in(reg32) lo, options(nostack, pure, nomem))
    };
    r
}

/// `hi` and `lo` rounded to E4M3 (nearest even, saturating to ±448; NaN stays NaN) as two bytes
/// in the low 16 bits: `lo` in bits 0..8, `hi` in bits 8..16.
#[inline(always)]
pub fn f32x2_to_e4m3x2(hi: f32, lo: f32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic. cvt puts its first source in the upper byte.
    unsafe {
        asm!("{{ .reg .b16 t; cvt.rn.satfinite.e4m3x2.f32 t, {h}, {l}; cvt.u32.u16 {r}, t; }}", r = out(reg32) r, h = in(reg32) hi, l = in(reg32) lo, options(nostack, pure, nomem))
    };
    r
}

/// Two E4M3 bytes (in the low 16 bits) to packed f16x2, exactly.
#[inline(always)]
pub fn e4m3x2_to_f16x2(b: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("{{ .reg .b16 t; cvt.u16.u32 t, {b}; cvt.rn.f16x2.e4m3x2 {r}, t; }}", r = out(reg32) r, b = in(reg32) b, options(nostack, pure, nomem))
    };
    r
}

/// Two E4M3 bytes in the *high* 16 bits to packed f16x2, exactly (ptxas reads the half
/// directly: `F2FP.F16.E4M3.UNPACK_B R, R.H1`, no shift).
#[inline(always)]
pub fn e4m3x2_hi_to_f16x2(b: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("{{ .reg .b16 l, h; mov.b32 {{l, h}}, {b}; cvt.rn.f16x2.e4m3x2 {r}, h; }}", r = out(reg32) r, b = in(reg32) b, options(nostack, pure, nomem))
    };
    r
}

/// `a` times the low half of `s` in both lanes (ptxas: `HMUL2 R, R, R.H0_H0`, no `prmt`).
#[inline(always)]
pub fn hmul2_by_lo(a: u32, s: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("{{ .reg .b16 l, h; .reg .b32 t; mov.b32 {{l, h}}, {s}; mov.b32 t, {{l, l}}; mul.rn.f16x2 {r}, {a}, t; }}", r = out(reg32) r, a = in(reg32) a, s = in(reg32) s, options(nostack, pure, nomem))
    };
    r
}

/// `a` times the high half of `s` in both lanes (ptxas: `HMUL2 R, R, R.H1_H1`).
#[inline(always)]
pub fn hmul2_by_hi(a: u32, s: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("{{ .reg .b16 l, h; .reg .b32 t; mov.b32 {{l, h}}, {s}; mov.b32 t, {{h, h}}; mul.rn.f16x2 {r}, {a}, t; }}", r = out(reg32) r, a = in(reg32) a, s = in(reg32) s, options(nostack, pure, nomem))
    };
    r
}

/// Packed f16x2 product.
#[inline(always)]
pub fn hmul2(a: u32, b: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("mul.rn.f16x2 {r}, {a}, {b};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, options(nostack, pure, nomem))
    };
    r
}

/// `prmt.b32`: byte permute of {b, a} by selector `s`.
#[inline(always)]
pub fn prmt(a: u32, b: u32, s: u32) -> u32 {
    let r: u32;
    // SAFETY: pure bit manipulation.
    unsafe {
        asm!("prmt.b32 {r}, {a}, {b}, {s};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, s = in(reg32) s, options(nostack, pure, nomem))
    };
    r
}

/// `(a & b) | c` as one `lop3.b32` (LUT 0xEA): ptxas encodes at most one immediate per
/// `LOP3`, so written as `&` then `|` of two constants it spends two.
#[inline(always)]
pub fn and_or(a: u32, b: u32, c: u32) -> u32 {
    let r: u32;
    // SAFETY: pure bit manipulation.
    unsafe {
        asm!("lop3.b32 {r}, {a}, {b}, {c}, 0xEA;", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c, options(nostack, pure, nomem))
    };
    r
}

/// Packed f16x2 to packed bf16x2 (through f32: exact for values bf16 can hold).
#[inline(always)]
pub fn f16x2_to_bf16x2(h: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!(
            "{{ .reg .b16 lo, hi; .reg .f32 flo, fhi; mov.b32 {{lo, hi}}, {h}; cvt.f32.f16 flo, lo; cvt.f32.f16 fhi, hi; cvt.rn.bf16x2.f32 {r}, fhi, flo; }}",
            r = out(reg32) r, h = in(reg32) h, options(nostack, pure, nomem)
        )
    };
    r
}

/// Packed f16x2 difference.
#[inline(always)]
pub fn hsub2(a: u32, b: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("sub.rn.f16x2 {r}, {a}, {b};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, options(nostack, pure, nomem))
    };
    r
}

/// Packed f16x2 fused multiply-add `a·b + c`, rounded once.
#[inline(always)]
pub fn hfma2(a: u32, b: u32, c: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("fma.rn.f16x2 {r}, {a}, {b}, {c};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c, options(nostack, pure, nomem))
    };
    r
}

/// `a·b + c` in f32, rounded once (`fma.rn.f32`).
#[inline(always)]
pub fn fma_f32(a: f32, b: f32, c: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("fma.rn.f32 {r}, {a}, {b}, {c};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c, options(nostack, pure, nomem))
    };
    r
}

/// f16 bits (the low 16 bits of `h`) to f32, exactly (`cvt.f32.f16`).
#[inline(always)]
pub fn f16_to_f32_bits(h: u32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic.
    unsafe {
        asm!("{{ .reg .b16 t; cvt.u16.u32 t, {h}; cvt.f32.f16 {r}, t; }}", r = out(reg32) r, h = in(reg32) h, options(nostack, pure, nomem))
    };
    r
}
