//! Global loads (read-only 16-byte vectors, L2-coherent loads) and the shared-memory window.
use core::arch::asm;

/// `ld.global.nc.v4.u32`: 16 bytes through the read-only path.
///
/// # Safety
/// `p` must be a valid, 16-byte-aligned global address whose data no thread writes meanwhile.
#[inline(always)]
pub unsafe fn ld_nc_v4(p: *const u8) -> [u32; 4] {
    let (a, b, c, d);
    asm!("ld.global.nc.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg64) p, options(nostack, readonly, pure));
    [a, b, c, d]
}

/// `ld.global.nc.v2.u32`: 8 bytes through the read-only path.
///
/// # Safety
/// As [`ld_nc_v4`], 8-byte aligned.
#[inline(always)]
pub unsafe fn ld_nc_v2(p: *const u8) -> [u32; 2] {
    let (a, b);
    asm!("ld.global.nc.v2.u32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, p = in(reg64) p, options(nostack, readonly, pure));
    [a, b]
}

/// `ld.global.cg.f32`: a load served from L2, seeing other blocks' writes made visible by a
/// device fence (split-K partials).
///
/// # Safety
/// `p` must be a valid, aligned global f32.
#[inline(always)]
pub unsafe fn ld_cg_f32(p: *const f32) -> f32 {
    let v: f32;
    asm!("ld.global.cg.f32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p, options(nostack, readonly));
    v
}

/// `ld.global.cg.v4.f32`: four f32 from L2, as [`ld_cg_f32`].
///
/// # Safety
/// `p` must be a valid, 16-byte-aligned global address of four f32.
#[inline(always)]
pub unsafe fn ld_cg_v4_f32(p: *const f32) -> [f32; 4] {
    let (a, b, c, d);
    asm!("ld.global.cg.v4.f32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg64) p, options(nostack, readonly));
    [a, b, c, d]
}

/// `st.global.cg.f32`: a store that bypasses L1 (split-K partials).
///
/// # Safety
/// `p` must be a valid, aligned global f32.
#[inline(always)]
pub unsafe fn st_cg_f32(p: *mut f32, v: f32) {
    asm!("st.global.cg.f32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack));
}

/// `st.global.v4.u32`: 16 bytes.
///
/// # Safety
/// `p` must be a valid, 16-byte-aligned global address.
#[inline(always)]
pub unsafe fn st_global_v4(p: *mut u8, v: [u32; 4]) {
    asm!("st.global.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg64) p, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack));
}

/// `st.global.v2.u32`: 8 bytes.
///
/// # Safety
/// `p` must be a valid, 8-byte-aligned global address.
#[inline(always)]
pub unsafe fn st_global_v2(p: *mut u8, v: [u32; 2]) {
    asm!("st.global.v2.u32 [{p}], {{{a}, {b}}};", p = in(reg64) p, a = in(reg32) v[0], b = in(reg32) v[1], options(nostack));
}

/// A 32-bit offset into the block's dynamic shared-memory window.
#[derive(Clone, Copy)]
pub struct Smem(pub u32);

impl Smem {
    /// The start of the window.
    #[inline(always)]
    pub fn base() -> Smem {
        let a: u32;
        // SAFETY: takes the address of the module-scope `dsmem` symbol.
        unsafe { asm!("mov.u32 {a}, dsmem;", a = out(reg32) a, options(nostack, pure, nomem)) };
        Smem(a)
    }

    /// `self + bytes`.
    #[inline(always)]
    pub fn add(self, bytes: u32) -> Smem {
        Smem(self.0 + bytes)
    }

    /// Stores a u32.
    ///
    /// # Safety
    /// The 4 bytes must lie inside the launch's dynamic shared memory.
    #[inline(always)]
    pub unsafe fn st_u32(self, v: u32) {
        asm!("st.shared.u32 [{a}], {v};", a = in(reg32) self.0, v = in(reg32) v, options(nostack));
    }

    /// Stores 16 bytes.
    ///
    /// # Safety
    /// As [`Smem::st_u32`], 16-byte aligned.
    #[inline(always)]
    pub unsafe fn st_v4(self, v: [u32; 4]) {
        asm!("st.shared.v4.u32 [{a}], {{{x}, {y}, {z}, {w}}};", a = in(reg32) self.0, x = in(reg32) v[0], y = in(reg32) v[1], z = in(reg32) v[2], w = in(reg32) v[3], options(nostack));
    }

    /// Stores 8 bytes.
    ///
    /// # Safety
    /// As [`Smem::st_u32`], 8-byte aligned.
    #[inline(always)]
    pub unsafe fn st_v2(self, v: [u32; 2]) {
        asm!("st.shared.v2.u32 [{a}], {{{x}, {y}}};", a = in(reg32) self.0, x = in(reg32) v[0], y = in(reg32) v[1], options(nostack));
    }

    /// Stores an f32.
    ///
    /// # Safety
    /// As [`Smem::st_u32`].
    #[inline(always)]
    pub unsafe fn st_f32(self, v: f32) {
        asm!("st.shared.f32 [{a}], {v};", a = in(reg32) self.0, v = in(reg32) v, options(nostack));
    }

    /// Loads a u32.
    ///
    /// # Safety
    /// As [`Smem::st_u32`].
    #[inline(always)]
    pub unsafe fn ld_u32(self) -> u32 {
        let v: u32;
        asm!("ld.shared.u32 {v}, [{a}];", v = out(reg32) v, a = in(reg32) self.0, options(nostack, readonly));
        v
    }

    /// Loads an f32.
    ///
    /// # Safety
    /// As [`Smem::st_u32`].
    #[inline(always)]
    pub unsafe fn ld_f32(self) -> f32 {
        let v: f32;
        asm!("ld.shared.f32 {v}, [{a}];", v = out(reg32) v, a = in(reg32) self.0, options(nostack, readonly));
        v
    }

    /// Loads 8 bytes.
    ///
    /// # Safety
    /// As [`Smem::st_u32`], 8-byte aligned.
    #[inline(always)]
    pub unsafe fn ld_v2(self) -> [u32; 2] {
        let (a, b);
        asm!("ld.shared.v2.u32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, p = in(reg32) self.0, options(nostack, readonly));
        [a, b]
    }

    /// Loads 16 bytes.
    ///
    /// # Safety
    /// As [`Smem::st_u32`], 16-byte aligned.
    #[inline(always)]
    pub unsafe fn ld_v4(self) -> [u32; 4] {
        let (a, b, c, d);
        asm!("ld.shared.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) self.0, options(nostack, readonly));
        [a, b, c, d]
    }
}
