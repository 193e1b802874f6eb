//! denseffn's device crate: the weight formats (compiled for the host too, so a format's bit
//! layout and decode live in one place), the launch parameter blocks shared by host and kernels,
//! and — when compiled for `nvptx64-nvidia-cuda` — the kernel DSL and the kernels.
#![no_std]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(abi_ptx, stdarch_nvptx, asm_experimental_arch, link_llvm_intrinsics)
)]

pub mod formats;
pub mod params;

#[cfg(target_arch = "nvptx64")]
pub mod dsl;
#[cfg(target_arch = "nvptx64")]
pub mod kernels;

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: trap ends the kernel; it has no other effect.
    unsafe { core::arch::nvptx::trap() }
}
