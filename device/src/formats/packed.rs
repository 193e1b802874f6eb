//! The packed activation layout the decode GEMVs stage into and, with `source::PACKED`, read
//! from global memory: f16 values in `mma.m16n8k16` B-fragment order, each token scaled by a
//! power of two per K split. Shared by the kernels and the CPU reference, so both place and
//! scale every value the same way.
use crate::params::PACK_TOKEN_WORDS;

/// Power of two that brings `amax` into [2^14, 2^15): (factor, 1/factor). NaN, Inf and 0 give
/// finite factors (the exponent is clamped), so nothing overflows f16 after scaling.
#[inline(always)]
pub fn pow2_scale(amax: f32) -> (f32, f32) {
    let e = ((amax.to_bits() >> 23) & 0xFF).clamp(20, 254);
    (
        f32::from_bits((268 - e) << 23),
        f32::from_bits((e - 14) << 23),
    )
}

/// Where column `x` (0..64) of absolute chunk `chunk`, token `t` of `m`, lies in a packed
/// buffer: (32-bit word index, half: 0 low, 1 high). Lane quad `tq` of the reading warp owns
/// words `8·tq..8·tq + 8` of a token's chunk, and its word `w` holds columns `8w + 2tq` and
/// `8w + 2tq + 1` (B-fragment registers `2j`, `2j + 1` of k-step `j`).
pub const fn word_of(chunk: u32, m: u32, t: u32, x: u32) -> (u32, u32) {
    let (w, tq, half) = (x / 8, (x % 8) / 2, x % 2);
    ((chunk * m + t) * PACK_TOKEN_WORDS + 8 * tq + w, half)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_of_a_chunk_has_its_own_slot() {
        let mut seen = [false; 64];
        for x in 0..64 {
            let (w, h) = word_of(0, 1, 0, x);
            assert!(w < PACK_TOKEN_WORDS);
            let slot = (w * 2 + h) as usize;
            assert!(!seen[slot], "column {x} shares slot {slot}");
            seen[slot] = true;
        }
        // Token 1 of 2 in chunk 3 starts after 7 token rows.
        assert_eq!(word_of(3, 2, 1, 0), (7 * PACK_TOKEN_WORDS, 0));
        // The B fragment of lane quad tq = 1, k-step 1: columns 18, 19 (register 2) and
        // 26, 27 (register 3).
        assert_eq!(word_of(0, 1, 0, 18), (8 + 2, 0));
        assert_eq!(word_of(0, 1, 0, 27), (8 + 3, 1));
    }

    #[test]
    fn scales_bring_the_maximum_into_range() {
        for &amax in &[
            1.0f32,
            3.7,
            65504.0,
            1e-30,
            3e38,
            0.0,
            f32::NAN,
            f32::INFINITY,
        ] {
            let (f, inv) = pow2_scale(amax);
            assert!(f.is_finite() && inv.is_finite() && f * inv == 1.0, "{amax}");
            if amax.is_normal() && amax > 1e-30 && amax < 1e38 {
                let s = amax * f;
                assert!((16384.0..32768.0).contains(&s), "{amax} -> {s}");
            }
        }
    }
}
