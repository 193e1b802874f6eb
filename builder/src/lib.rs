//! Builds a `#![no_std]` Rust crate to PTX in one call, for use from a `build.rs`.
//!
//! ```no_run
//! let ptx = denseffn_ptx_builder::PtxBuilder::new("device")
//!     .toolchain("nightly-2026-05-20")
//!     .arch("sm_90")
//!     .build()
//!     .unwrap_or_else(|e| panic!("{e}"));
//! println!("cargo:rustc-env=MY_PTX={}", ptx.display());
//! ```
//!
//! The chain (every step verified on this project's machines, see TOOLCHAIN.md in the docs):
//! 1. `cargo +<nightly> rustc --release --target nvptx64-nvidia-cuda -Zbuild-std=core
//!    -- --emit=llvm-bc` in a target directory of its own (no lock contention with the outer build);
//! 2. `llvm-link --only-needed` of the crate's bitcode with `core`'s bitcode objects (taken out of
//!    the rlib with `llvm-ar x`);
//! 3. `opt -O3`, then `llc -O3 -mcpu=<arch> -mattr=+ptx<isa>` to PTX;
//! 4. module-scope declarations that Rust cannot express (the dynamic shared-memory window) are
//!    added to the PTX text.
//!
//! A missing piece (toolchain, `rust-src`, `llvm-tools`) is an error naming the `rustup` command
//! that installs it.

use std::env;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a PTX build failed; `Display` says what to do about it.
#[derive(Debug)]
pub enum BuildError {
    /// The pinned toolchain, or one of its components, is not installed.
    Missing { what: String, fix: String },
    /// A step of the chain ran and failed.
    Step { step: String, output: String },
    /// Reading or writing a file failed.
    Io(String),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Missing { what, fix } => {
                write!(
                    f,
                    "PTX build: {what} is missing; install it with:\n    {fix}"
                )
            }
            BuildError::Step { step, output } => write!(f, "PTX build: {step} failed:\n{output}"),
            BuildError::Io(e) => write!(f, "PTX build: {e}"),
        }
    }
}

impl std::error::Error for BuildError {}

/// One PTX build: a crate directory, a pinned toolchain, a target architecture.
#[derive(Debug, Clone)]
pub struct PtxBuilder {
    crate_dir: PathBuf,
    toolchain: String,
    arch: String,
    ptx_isa: String,
    out_dir: Option<PathBuf>,
    dynamic_smem: Option<String>,
    launch_bounds: Vec<(String, u32, u32)>,
    param_aligns: Vec<(String, u32)>,
    cluster_dims: Vec<(String, u32)>,
}

const TARGET: &str = "nvptx64-nvidia-cuda";

impl PtxBuilder {
    /// A build of the crate at `crate_dir` (relative to the calling package's manifest directory).
    pub fn new(crate_dir: impl AsRef<Path>) -> Self {
        let base = env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_default();
        PtxBuilder {
            crate_dir: base.join(crate_dir),
            toolchain: "nightly".into(),
            arch: "sm_90".into(),
            ptx_isa: "80".into(),
            out_dir: None,
            dynamic_smem: None,
            launch_bounds: Vec::new(),
            param_aligns: Vec::new(),
            cluster_dims: Vec::new(),
        }
    }

    /// The rustup toolchain name to build with (pin a dated nightly).
    pub fn toolchain(mut self, name: &str) -> Self {
        self.toolchain = name.into();
        self
    }

    /// The GPU architecture passed to `llc -mcpu` (e.g. `sm_90`, `sm_90a`).
    pub fn arch(mut self, arch: &str) -> Self {
        self.arch = arch.into();
        self
    }

    /// The PTX ISA version as digits (`"80"` is ISA 8.0).
    pub fn ptx_isa(mut self, isa: &str) -> Self {
        self.ptx_isa = isa.into();
        self
    }

    /// Where the build goes (default: `$OUT_DIR/ptx-build`).
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Declares `.extern .shared .align 16 .b8 <name>[];` at module scope, the dynamic
    /// shared-memory window that kernels address by that name from inline PTX.
    pub fn dynamic_shared(mut self, name: &str) -> Self {
        self.dynamic_smem = Some(name.into());
        self
    }

    /// Gives entry point `kernel` the performance directives `.maxntid threads, 1, 1` and
    /// `.minnctapersm blocks`, so ptxas fits its registers to `blocks` resident blocks of
    /// `threads` (what CUDA C's `__launch_bounds__` does). Rust cannot express them.
    pub fn launch_bounds(mut self, kernel: &str, threads: u32, blocks: u32) -> Self {
        self.launch_bounds.push((kernel.into(), threads, blocks));
        self
    }

    /// Declares entry point `kernel`'s first (by-value) parameter `.align bytes` in the PTX, so
    /// a TMA tensor map at its start is aligned in the parameter space as the driver's
    /// `CUtensorMap` is, as `__grid_constant__` parameters are in CUDA C++. Rust's nvptx kernel
    /// ABI declares at most 16.
    pub fn param_align(mut self, kernel: &str, bytes: u32) -> Self {
        self.param_aligns.push((kernel.into(), bytes));
        self
    }

    /// Declares entry point `kernel` a cluster kernel of `blocks` blocks along x
    /// (`.explicitcluster`, `.reqnctapercluster blocks, 1, 1`): an ordinary launch then runs
    /// its grid (a multiple of `blocks` in x) in such clusters.
    pub fn cluster_dims(mut self, kernel: &str, blocks: u32) -> Self {
        self.cluster_dims.push((kernel.into(), blocks));
        self
    }

    /// Runs the chain; returns the path of the `.ptx` file. Emits `cargo:rerun-if-changed` for
    /// the crate's sources so the outer build reruns only when they change.
    pub fn build(&self) -> Result<PathBuf, BuildError> {
        self.emit_rerun_lines();
        let out = match &self.out_dir {
            Some(d) => d.clone(),
            None => PathBuf::from(env::var_os("OUT_DIR").ok_or_else(|| {
                BuildError::Io("OUT_DIR is not set (call from build.rs or set out_dir)".into())
            })?)
            .join("ptx-build"),
        };
        fs::create_dir_all(&out).map_err(|e| BuildError::Io(format!("{}: {e}", out.display())))?;
        let sysroot = self.check_toolchain()?;
        let tools = sysroot.join("lib/rustlib").join(host_triple()).join("bin");
        let tool = |name: &str| -> Result<PathBuf, BuildError> {
            let p = tools.join(name);
            if p.exists() {
                Ok(p)
            } else {
                Err(self.missing_component("llvm-tools", &format!("{} ({})", name, p.display())))
            }
        };
        let (llvm_link, opt, llc, llvm_ar) = (
            tool("llvm-link")?,
            tool("opt")?,
            tool("llc")?,
            tool("llvm-ar")?,
        );

        let target_dir = out.join("target");
        let mut cargo = self.clean_command("cargo");
        cargo
            .arg(format!("+{}", self.toolchain))
            .arg("rustc")
            .arg("--release")
            .arg("--manifest-path")
            .arg(self.crate_dir.join("Cargo.toml"))
            .arg("--target")
            .arg(TARGET)
            .arg("-Zbuild-std=core")
            .arg("--target-dir")
            .arg(&target_dir)
            .arg("--")
            .arg("--emit=llvm-bc");
        // Flags for every crate of the nested build, core included: panics become a trap with
        // no formatting code (no unresolved core::fmt externs in the PTX).
        let flags = [
            "-Cpanic=immediate-abort".to_string(),
            "-Zunstable-options".to_string(),
            "-Ccodegen-units=1".to_string(),
            "-Copt-level=3".to_string(),
            format!("-Ctarget-cpu={}", self.arch),
        ];
        cargo.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"));
        run("cargo rustc (nvptx64 bitcode)", &mut cargo)?;

        let deps = target_dir.join(TARGET).join("release/deps");
        let crate_bc = newest(&deps, |n| n.ends_with(".bc") && !n.starts_with("core-"))?;
        let core_rlib = newest(&deps, |n| n.starts_with("libcore-") && n.ends_with(".rlib"))?;
        let core_objs = out.join("core-objs");
        let _ = fs::remove_dir_all(&core_objs);
        fs::create_dir_all(&core_objs).map_err(|e| BuildError::Io(e.to_string()))?;
        let mut ar = Command::new(&llvm_ar);
        ar.current_dir(&core_objs).arg("x").arg(&core_rlib);
        run("llvm-ar x libcore", &mut ar)?;
        let mut objs: Vec<PathBuf> = fs::read_dir(&core_objs)
            .map_err(|e| BuildError::Io(e.to_string()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "o"))
            .collect();
        objs.sort();

        let linked = out.join("linked.bc");
        let mut link = Command::new(&llvm_link);
        link.arg(&crate_bc)
            .arg("--only-needed")
            .args(&objs)
            .arg("-o")
            .arg(&linked);
        run("llvm-link", &mut link)?;

        let optimized = out.join("opt.bc");
        let mut o = Command::new(&opt);
        o.arg("-O3").arg(&linked).arg("-o").arg(&optimized);
        run("opt -O3", &mut o)?;

        let ptx = out.join("kernels.ptx");
        let mut l = Command::new(&llc);
        l.arg("-O3")
            .arg(format!("-mcpu={}", self.arch))
            .arg(format!("-mattr=+ptx{}", self.ptx_isa))
            .arg(&optimized)
            .arg("-o")
            .arg(&ptx);
        run("llc", &mut l)?;

        let mut text = fs::read_to_string(&ptx).map_err(|e| BuildError::Io(e.to_string()))?;
        if let Some(name) = &self.dynamic_smem {
            let decl = format!(".extern .shared .align 16 .b8 {name}[];");
            text = insert_after_address_size(&text, &decl)
                .ok_or_else(|| BuildError::Io("no .address_size line in the PTX".into()))?;
        }
        for (kernel, threads, blocks) in &self.launch_bounds {
            text = add_launch_bounds(&text, kernel, *threads, *blocks).ok_or_else(|| {
                BuildError::Io(format!("launch_bounds: no entry point {kernel} in the PTX"))
            })?;
        }
        for (kernel, blocks) in &self.cluster_dims {
            text = add_cluster_dims(&text, kernel, *blocks).ok_or_else(|| {
                BuildError::Io(format!("cluster_dims: no entry point {kernel} in the PTX"))
            })?;
        }
        for (kernel, bytes) in &self.param_aligns {
            text = set_param_align(&text, kernel, *bytes).ok_or_else(|| {
                BuildError::Io(format!(
                    "param_align: no by-value parameter of {kernel} in the PTX"
                ))
            })?;
        }
        fs::write(&ptx, text).map_err(|e| BuildError::Io(e.to_string()))?;
        Ok(ptx)
    }

    fn emit_rerun_lines(&self) {
        println!(
            "cargo:rerun-if-changed={}",
            self.crate_dir.join("Cargo.toml").display()
        );
        println!(
            "cargo:rerun-if-changed={}",
            self.crate_dir.join("src").display()
        );
        for f in walk(&self.crate_dir.join("src")) {
            println!("cargo:rerun-if-changed={}", f.display());
        }
    }

    /// `rustc --print sysroot` of the pinned toolchain, with rust-src present.
    fn check_toolchain(&self) -> Result<PathBuf, BuildError> {
        let install = format!(
            "rustup toolchain install {} --profile minimal --component rust-src,llvm-tools",
            self.toolchain
        );
        let mut c = self.clean_command("rustc");
        c.env("RUSTUP_AUTO_INSTALL", "0");
        c.arg(format!("+{}", self.toolchain))
            .arg("--print")
            .arg("sysroot");
        let out = c.output().map_err(|_| BuildError::Missing {
            what: "rustup (with `rustc +toolchain` support)".into(),
            fix: install.clone(),
        })?;
        if !out.status.success() {
            return Err(BuildError::Missing {
                what: format!("the toolchain {}", self.toolchain),
                fix: install,
            });
        }
        let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let core_src = sysroot.join("lib/rustlib/src/rust/library/core");
        if !core_src.exists() {
            return Err(self.missing_component("rust-src", &core_src.display().to_string()));
        }
        Ok(sysroot)
    }

    fn missing_component(&self, component: &str, what: &str) -> BuildError {
        BuildError::Missing {
            what: format!("the {component} component of {} ({what})", self.toolchain),
            fix: format!(
                "rustup component add {component} --toolchain {}",
                self.toolchain
            ),
        }
    }

    /// A command without the outer cargo's environment, which would override the toolchain,
    /// the target dir and the flags of the nested build.
    fn clean_command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        for (k, _) in env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            let drop = k == "RUSTUP_TOOLCHAIN"
                || k == "RUSTC"
                || k == "RUSTC_WRAPPER"
                || k == "RUSTC_WORKSPACE_WRAPPER"
                || k == "RUSTFLAGS"
                || k == "RUSTDOCFLAGS"
                || k == "CARGO_TARGET_DIR"
                || k == "CARGO_BUILD_TARGET"
                || k == "CARGO_ENCODED_RUSTFLAGS"
                || k == "CARGO_MAKEFLAGS"
                || k.starts_with("CARGO_PROFILE_")
                || k.starts_with("CARGO_FEATURE_")
                || k.starts_with("CARGO_CFG_")
                || k.starts_with("CARGO_PKG_")
                || k.starts_with("CARGO_MANIFEST_")
                || k.starts_with("CARGO_BUILD_")
                || k.starts_with("DEP_")
                || k == "CARGO_PRIMARY_PACKAGE"
                || k == "CARGO_CRATE_NAME"
                || k == "OUT_DIR"
                || k == "TARGET"
                || k == "HOST"
                || k == "OPT_LEVEL"
                || k == "PROFILE"
                || k == "DEBUG"
                || k == "NUM_JOBS";
            if drop {
                c.env_remove(&k);
            }
        }
        c
    }
}

fn host_triple() -> String {
    // The llvm-tools live under the host triple of the toolchain; HOST is set for build scripts.
    env::var("HOST").unwrap_or_else(|_| "x86_64-unknown-linux-gnu".into())
}

fn run(step: &str, cmd: &mut Command) -> Result<(), BuildError> {
    let out = cmd.output().map_err(|e| BuildError::Step {
        step: step.into(),
        output: format!("could not start {:?}: {e}", cmd.get_program()),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(BuildError::Step {
            step: step.into(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        })
    }
}

fn newest(dir: &Path, pred: impl Fn(&str) -> bool) -> Result<PathBuf, BuildError> {
    let rd = fs::read_dir(dir).map_err(|e| BuildError::Io(format!("{}: {e}", dir.display())))?;
    rd.filter_map(|e| e.ok())
        .filter(|e| pred(&e.file_name().to_string_lossy()))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
        .ok_or_else(|| BuildError::Io(format!("no matching artifact in {}", dir.display())))
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                v.extend(walk(&p));
            } else {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

fn insert_after_address_size(ptx: &str, line: &str) -> Option<String> {
    let pos = ptx.find(".address_size")?;
    let eol = pos + ptx[pos..].find('\n')?;
    Some(format!("{}\n{}\n{}", &ptx[..eol], line, &ptx[eol + 1..]))
}

/// Inserts `.maxntid`/`.minnctapersm` between entry `kernel`'s parameter list and its body.
fn add_launch_bounds(ptx: &str, kernel: &str, threads: u32, blocks: u32) -> Option<String> {
    add_entry_directives(
        ptx,
        kernel,
        &format!(".maxntid {threads}, 1, 1\n.minnctapersm {blocks}"),
    )
}

/// Inserts `.explicitcluster`/`.reqnctapercluster blocks, 1, 1` between entry `kernel`'s
/// parameter list and its body.
fn add_cluster_dims(ptx: &str, kernel: &str, blocks: u32) -> Option<String> {
    add_entry_directives(
        ptx,
        kernel,
        &format!(".explicitcluster\n.reqnctapercluster {blocks}, 1, 1"),
    )
}

/// Inserts the lines `directives` between entry `kernel`'s parameter list and its body.
fn add_entry_directives(ptx: &str, kernel: &str, directives: &str) -> Option<String> {
    let entry = ptx.find(&format!(".entry {kernel}("))?;
    let body = entry + ptx[entry..].find("\n{")?;
    Some(format!("{}\n{directives}{}", &ptx[..body], &ptx[body..]))
}

/// Rewrites the alignment of entry `kernel`'s first parameter (`.param .align N .b8
/// <kernel>_param_0[size]`) to `bytes`.
fn set_param_align(ptx: &str, kernel: &str, bytes: u32) -> Option<String> {
    let entry = ptx.find(&format!(".entry {kernel}("))?;
    let at = entry + ptx[entry..].find(&format!(" .b8 {kernel}_param_0["))?;
    let start = ptx[..at].rfind(".param .align ")?;
    // Only a declaration `.param .align N` right before the name.
    ptx[start + ".param .align ".len()..at]
        .parse::<u32>()
        .ok()?;
    Some(format!(
        "{}.param .align {bytes}{}",
        &ptx[..start],
        &ptx[at..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declaration_goes_after_address_size() {
        let p = ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k()\n{}\n";
        let out = insert_after_address_size(p, ".extern .shared .align 16 .b8 smem[];").unwrap();
        assert!(out.contains(".address_size 64\n.extern .shared .align 16 .b8 smem[];\n"));
        assert!(out.ends_with(".visible .entry k()\n{}\n"));
        assert!(insert_after_address_size(".version 8.0\n", "x").is_none());
    }

    #[test]
    fn launch_bounds_go_between_parameters_and_body() {
        let p = ".visible .entry a(\n.param .u64 a_0\n)\n{\nret;\n}\n.visible .entry ab(\n)\n{\nret;\n}\n";
        let out = add_launch_bounds(p, "ab", 256, 4).unwrap();
        assert!(out.contains(".entry ab(\n)\n.maxntid 256, 1, 1\n.minnctapersm 4\n{"));
        assert!(out.starts_with(".visible .entry a(\n.param .u64 a_0\n)\n{"));
        assert!(add_launch_bounds(p, "b", 256, 4).is_none());
        let out = add_cluster_dims(p, "ab", 2).unwrap();
        assert!(out.contains(".entry ab(\n)\n.explicitcluster\n.reqnctapercluster 2, 1, 1\n{"));
        assert!(add_cluster_dims(p, "b", 2).is_none());
    }

    #[test]
    fn param_align_rewrites_only_the_named_entry() {
        let p = ".visible .entry k(\n\t.param .align 8 .b8 k_param_0[320]\n)\n{\n}\n\
                 .visible .entry kk(\n\t.param .align 8 .b8 kk_param_0[320]\n)\n{\n}\n";
        let out = set_param_align(p, "kk", 64).unwrap();
        assert!(out.contains(".param .align 8 .b8 k_param_0[320]"));
        assert!(out.contains(".param .align 64 .b8 kk_param_0[320]"));
        assert_eq!(out.len(), p.len() + 1);
        assert!(set_param_align(p, "x", 64).is_none());
        let scalar = ".visible .entry s(\n\t.param .u64 s_param_0\n)\n{\n}\n";
        assert!(set_param_align(scalar, "s", 64).is_none());
    }

    #[test]
    fn missing_toolchain_names_the_rustup_command() {
        let b = PtxBuilder::new("nowhere").toolchain("nightly-1999-01-01");
        let err = b.check_toolchain().unwrap_err().to_string();
        assert!(
            err.contains("rustup toolchain install nightly-1999-01-01"),
            "unexpected message: {err}"
        );
    }
}
