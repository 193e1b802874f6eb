//! E4M3 ("e4m3fn", OCP FP8): 1 sign, 4 exponent (bias 7), 3 mantissa bits; subnormals; no Inf;
//! `S.1111.111` (0x7F, 0xFF) is NaN. Max finite 448. Used for NVFP4 block scales and FP8 weights.

/// Largest finite value.
pub const MAX: f32 = 448.0;

/// Value of an E4M3 byte: subnormals exact, 0x7F / 0xFF decode to NaN.
#[inline]
pub fn decode(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> 3) & 0xF) as i32;
    let m = (b & 7) as f32;
    if e == 0xF && b & 7 == 7 {
        return f32::NAN;
    }
    let mag = if e == 0 {
        m / 8.0 * pow2(-6)
    } else {
        (1.0 + m / 8.0) * pow2(e - 7)
    };
    sign * mag
}

/// Nearest E4M3 byte to `v`, round-to-nearest-even, saturating to ±448 (never NaN for finite
/// input). NaN input gives 0x7F.
#[inline]
pub fn encode(v: f32) -> u8 {
    if v.is_nan() {
        return 0x7F;
    }
    let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
    let a = v.abs();
    if a >= MAX {
        return sign | 0x7E;
    }
    // Codes 0x00..=0x7E are ordered by value: binary-search the last code <= a, then round.
    let (mut lo, mut hi) = (0u8, 0x7Eu8);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if decode(mid) <= a {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let below = lo;
    let best = if below == 0x7E {
        below
    } else {
        let (d0, d1) = (a - decode(below), decode(below + 1) - a);
        if d1 < d0 || (d1 == d0 && (below + 1) & 1 == 0) {
            below + 1
        } else {
            below
        }
    };
    if best == 0 {
        0
    } else {
        sign | best
    }
}

#[inline]
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}
