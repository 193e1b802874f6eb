//! Q4_K: ggml's `block_q4_K`, byte-identical with GGUF files. 256 values per 144-byte block:
//!
//! | bytes | field |
//! |---|---|
//! | 0..2 | `d`: f16, scale of the sub-block scales |
//! | 2..4 | `dmin`: f16, scale of the sub-block mins |
//! | 4..16 | `scales`: eight 6-bit scales and eight 6-bit mins, packed (see [`scale_min`]) |
//! | 16..144 | `qs`: 4-bit codes; byte `32·p + l` holds value `64·p + l` (low nibble) and `64·p + 32 + l` (high) |
//!
//! Value `i` of sub-block `s = i / 32` is `d·scale[s]·q − dmin·min[s]`, computed in f32 exactly as
//! ggml's reference `dequantize_row_q4_K` does (two products, one subtraction, no fused multiply-add).

/// Values per block.
pub const QK_K: usize = 256;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 144;
/// Bytes of packed scales and mins.
pub const SCALE_BYTES: usize = 12;

/// The 6-bit (scale, min) of sub-block `j` (0..8) from the 12 packed bytes: sub-blocks 0..4 keep
/// theirs in the low 6 bits of bytes `j` and `j + 4`; sub-blocks 4..8 take their low 4 bits from
/// byte `j + 4` (scale: low nibble, min: high nibble) and their top 2 bits from the top bits of
/// bytes `j − 4` (scale) and `j` (min).
#[inline]
pub fn scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// Packs eight 6-bit scales and mins into the 12-byte layout [`scale_min`] reads.
pub fn pack_scales(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; SCALE_BYTES] {
    let mut out = [0u8; SCALE_BYTES];
    for j in 0..4 {
        out[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        out[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6);
        out[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4);
    }
    out
}

/// IEEE half bits to f32, exactly (subnormals, infinities and NaN included).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1F) as u32;
    let man = (h & 0x3FF) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m · 2^-24, renormalised.
            let shift = m.leading_zeros() - 21; // bring the top set bit to bit 10
            let m = (m << shift) & 0x3FF;
            sign | ((113 - shift) << 23) | (m << 13)
        }
        (31, 0) => sign | 0x7F80_0000,
        (31, m) => sign | 0x7FC0_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// Dequantizes one block into `out` (256 values).
pub fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
    let dmin = f16_to_f32(u16::from_le_bytes([block[2], block[3]]));
    let scales = &block[4..16];
    let qs = &block[16..BLOCK_BYTES];
    for p in 0..4 {
        let (sc0, m0) = scale_min(scales, 2 * p);
        let (sc1, m1) = scale_min(scales, 2 * p + 1);
        let (d0, min0) = (d * sc0 as f32, dmin * m0 as f32);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        for l in 0..32 {
            let q = qs[32 * p + l];
            out[64 * p + l] = d0 * (q & 0xF) as f32 - min0;
            out[64 * p + 32 + l] = d1 * (q >> 4) as f32 - min1;
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    #[test]
    fn f16_conversion_is_exact_for_every_bit_pattern() {
        for h in 0..=u16::MAX {
            let v = f16_to_f32(h);
            let (s, e, m) = ((h >> 15) as i32, ((h >> 10) & 31) as i32, (h & 1023) as f64);
            let sign = if s == 1 { -1.0 } else { 1.0 };
            let want = match e {
                0 => sign * m * 2f64.powi(-24),
                31 if m == 0.0 => sign * f64::INFINITY,
                31 => f64::NAN,
                _ => sign * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
            };
            if want.is_nan() {
                assert!(v.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(v as f64, want, "{h:#06x}");
                assert_eq!(v.is_sign_negative(), s == 1, "{h:#06x} sign");
            }
        }
    }

    #[test]
    fn scales_pack_and_unpack() {
        for seed in 0..64u8 {
            let sc: [u8; 8] =
                core::array::from_fn(|i| (seed.wrapping_mul(7).wrapping_add(i as u8 * 13)) & 63);
            let mn: [u8; 8] =
                core::array::from_fn(|i| (seed.wrapping_mul(11).wrapping_add(i as u8 * 29)) & 63);
            let packed = pack_scales(&sc, &mn);
            for j in 0..8 {
                assert_eq!(
                    scale_min(&packed, j),
                    (sc[j], mn[j]),
                    "seed {seed} sub-block {j}"
                );
            }
        }
    }

    /// A block written field by field, decoded by the definition (value by value, f32 as ggml).
    fn by_definition(
        d: u16,
        dmin: u16,
        sc: [u8; 8],
        mn: [u8; 8],
        codes: &[u8; 256],
    ) -> (Vec<u8>, Vec<f32>) {
        let mut b = Vec::new();
        b.extend_from_slice(&d.to_le_bytes());
        b.extend_from_slice(&dmin.to_le_bytes());
        b.extend_from_slice(&pack_scales(&sc, &mn));
        let mut qs = [0u8; 128];
        for (i, &c) in codes.iter().enumerate() {
            let (p, r) = (i / 64, i % 64);
            qs[32 * p + r % 32] |= if r < 32 { c & 15 } else { (c & 15) << 4 };
        }
        b.extend_from_slice(&qs);
        let (df, mf) = (f16_to_f32(d), f16_to_f32(dmin));
        let want = (0..256)
            .map(|i| (df * sc[i / 32] as f32) * (codes[i] & 15) as f32 - (mf * mn[i / 32] as f32))
            .collect();
        (b, want)
    }

    #[test]
    fn dequantization_matches_the_definition_on_extreme_blocks() {
        let codes: [u8; 256] = core::array::from_fn(|i| (i * 7 + i / 13) as u8 & 15);
        let cases: [(u16, u16, [u8; 8], [u8; 8]); 6] = [
            (0x7BFF, 0x7BFF, [63; 8], [63; 8]), // largest finite d, dmin, scales, mins
            (0x0001, 0x0001, [63; 8], [1; 8]),  // smallest subnormal d / dmin
            (0x3C00, 0x0000, [0, 1, 2, 3, 60, 61, 62, 63], [0; 8]), // no mins
            (0xBC00, 0x3C00, [1; 8], [63; 8]),  // negative d
            (
                0x3555,
                0x2E66,
                [17, 33, 5, 63, 0, 48, 12, 31],
                [63, 0, 31, 32, 16, 15, 1, 62],
            ),
            (
                0x0400,
                0x8400,
                [63, 62, 61, 60, 59, 58, 57, 56],
                [5, 10, 15, 20, 25, 30, 35, 40],
            ),
        ];
        for (d, dmin, sc, mn) in cases {
            let (block, want) = by_definition(d, dmin, sc, mn, &codes);
            assert_eq!(block.len(), BLOCK_BYTES);
            let mut got = [0f32; 256];
            dequantize_block(&block, &mut got);
            for i in 0..256 {
                assert_eq!(
                    got[i].to_bits(),
                    want[i].to_bits(),
                    "d={d:#06x} dmin={dmin:#06x} value {i}"
                );
            }
        }
    }
}
