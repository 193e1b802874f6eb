//! `cargo xtask gpu-bundle [--gpu-only] [--base REV] [--variant NAME=PATCH]…`: builds every
//! test and bench binary (release) and the release `denseffn` CLI here, copies them into
//! `gpu-bundle/bin/` with `gpu-bundle/run.sh`, for a machine that has a GPU but no Rust
//! (`--gpu-only`: only the GPU tests and the CLI; `--base REV`: also the release `denseffn` of
//! git revision REV, built in a temporary worktree, as `bin/denseffn-base`, for `run.sh ab`;
//! `--variant NAME=PATCH`, repeatable: HEAD with PATCH applied, built in a temporary worktree,
//! as `bin/denseffn-NAME` and its GPU tests as `bin/test-gpu-NAME`, `bin/test-gpu_lora-NAME`,
//! for trying a change that is not committed against the tree in the same device call).
//!
//! There: `bash gpu-bundle/run.sh [tests|gpu-tests|bench|all|sanitize]` runs them, writing logs and the bench
//! table under `$OUT` (default `gpu-bundle/out`); `bash gpu-bundle/run.sh report [ARGS]` runs
//! `denseffn bench ARGS --out $OUT/report` (tables and plots); `bash gpu-bundle/run.sh ab [ARGS]`
//! runs `denseffn bench ARGS` with the base binary and with this one, one after the other on the
//! same GPU, and `denseffn compare`s them into `$OUT/ab.md` (each variant's against this one
//! into `$OUT/ab-NAME.md`). The device tool returns at most 8 files from `$OUT`: `run.sh` packs
//! them into `$OUT/out.tgz` when there are more.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const USAGE: &str =
    "usage: cargo xtask gpu-bundle [--gpu-only] [--base REV] [--variant NAME=PATCH]...";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("gpu-bundle") {
        eprintln!("{USAGE}");
        std::process::exit(2);
    }
    let (mut gpu_only, mut base, mut variants) = (false, None, Vec::new());
    let mut rest = args[1..].iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--gpu-only" => gpu_only = true,
            "--base" => match rest.next() {
                Some(rev) => base = Some(rev.clone()),
                None => {
                    eprintln!("--base needs a git revision\n{USAGE}");
                    std::process::exit(2);
                }
            },
            "--variant" => match rest.next().and_then(|v| v.split_once('=')) {
                Some((name, patch)) if valid_name(name) => {
                    let patch = fs::canonicalize(patch).unwrap_or_else(|e| {
                        eprintln!("--variant {name}: {patch}: {e}");
                        std::process::exit(2);
                    });
                    variants.push((name.to_string(), patch));
                }
                _ => {
                    eprintln!("--variant needs NAME=PATCH, NAME in letters, digits and '_', not base\n{USAGE}");
                    std::process::exit(2);
                }
            },
            other => {
                eprintln!("unknown argument {other}\n{USAGE}");
                std::process::exit(2);
            }
        }
    }
    gpu_bundle(gpu_only, base.as_deref(), &variants);
}

/// A variant's name: it becomes part of file names here and on the device machine.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "base"
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A temporary worktree of git revision `rev` with `patch` applied (if any), named `tag` (its
/// own target directory `target/xtask-TAG`, kept for the next build): its release `denseffn`
/// copied to `bin/denseffn-SUFFIX` and, with `tests`, its GPU test binaries to
/// `bin/test-gpu*-SUFFIX`.
fn build_in_worktree(
    root: &Path,
    rev: &str,
    patch: Option<&Path>,
    suffix: &str,
    bin: &Path,
    tests: bool,
) {
    let git = |args: &[&str], dir: &Path| {
        let ok = Command::new("git")
            .current_dir(dir)
            .args(args)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("git {args:?} failed");
            std::process::exit(1);
        }
    };
    let wt = root.join("target").join(format!("xtask-{suffix}-worktree"));
    let _ = Command::new("git")
        .current_dir(root)
        .args(["worktree", "remove", "--force"])
        .arg(&wt)
        .stderr(Stdio::null())
        .status();
    git(
        &["worktree", "add", "--detach", wt.to_str().unwrap(), rev],
        root,
    );
    if let Some(p) = patch {
        git(&["apply", p.to_str().unwrap()], &wt);
    }
    let manifest = wt.join("Cargo.toml");
    let target = root.join("target").join(format!("xtask-{suffix}"));
    let place = [
        "--manifest-path",
        manifest.to_str().unwrap(),
        "--target-dir",
        target.to_str().unwrap(),
    ];
    build_cli(&place, &bin.join(format!("denseffn-{suffix}")));
    if tests {
        let mut args = vec!["test", "--release", "--no-run", "--package", "denseffn"];
        args.extend_from_slice(&place);
        for (kind, name, exe) in built_executables(&args, true) {
            if kind == "test" && name.starts_with("gpu") {
                let dst = bin.join(format!("test-{name}-{suffix}"));
                fs::copy(&exe, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", exe.display()));
                println!("{}", dst.display());
            }
        }
    }
    git(
        &["worktree", "remove", "--force", wt.to_str().unwrap()],
        root,
    );
    match patch {
        Some(p) => println!("(git {rev} + {})", p.display()),
        None => println!("(git {rev})"),
    }
}

/// `cargo build --release --bin denseffn EXTRA` and copies the binary to `dst`.
fn build_cli(extra: &[&str], dst: &Path) {
    let mut args = vec!["build", "--release", "--bin", "denseffn"];
    args.extend_from_slice(extra);
    let cli = built_executables(&args, false);
    let Some((_, _, exe)) = cli
        .iter()
        .find(|(kind, name, _)| kind == "bin" && name == "denseffn")
    else {
        eprintln!("cargo {args:?} produced no denseffn binary");
        std::process::exit(1);
    };
    fs::copy(exe, dst).unwrap_or_else(|e| panic!("copy {}: {e}", exe.display()));
    println!("{}", dst.display());
}

/// Runs `cargo <args> --message-format=json` and returns (kind, name, executable) of each
/// test or bench artifact (`test_profile`), or of each binary (`!test_profile`).
fn built_executables(args: &[&str], test_profile: bool) -> Vec<(String, String, PathBuf)> {
    let out = Command::new(env!("CARGO"))
        .args(args)
        .arg("--message-format=json")
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo");
    if !out.status.success() {
        eprintln!("cargo {args:?} failed");
        std::process::exit(1);
    }
    let mut v = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact"
            || msg["profile"]["test"].as_bool().unwrap_or(false) != test_profile
        {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        let kind = msg["target"]["kind"][0]
            .as_str()
            .unwrap_or("test")
            .to_string();
        let name = msg["target"]["name"]
            .as_str()
            .unwrap_or("unknown")
            .replace('-', "_");
        let pkg = msg["package_id"].as_str().unwrap_or("");
        let name = if kind == "lib" && pkg.contains("device") {
            format!("device_{name}")
        } else {
            name
        };
        v.push((kind, name, PathBuf::from(exe)));
    }
    v
}

/// `gpu_only`: just the GPU test binaries (`tests/gpu*.rs`) and the CLI, which stay well
/// inside the device tool's 64 MiB carry limit that the whole bundle nears.
/// `base`: also the release `denseffn` of that git revision, as `bin/denseffn-base`.
/// `variants`: (name, patch) each built from HEAD with the patch applied.
fn gpu_bundle(gpu_only: bool, base: Option<&str>, variants: &[(String, PathBuf)]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let bundle = root.join("gpu-bundle");
    let _ = fs::remove_dir_all(&bundle);
    fs::create_dir_all(bundle.join("bin")).unwrap();
    let mut exes = built_executables(
        &[
            "test",
            "--release",
            "--no-run",
            "--workspace",
            "--exclude",
            "xtask",
        ],
        true,
    );
    if gpu_only {
        exes.retain(|(kind, name, _)| kind == "test" && name.starts_with("gpu"));
    } else {
        exes.extend(built_executables(
            &["bench", "--no-run", "--package", "denseffn"],
            true,
        ));
    }
    for (kind, name, exe) in &exes {
        let file = match kind.as_str() {
            "bench" => format!("bench-{name}"),
            "test" => format!("test-{name}"),
            other => format!("test-{other}-{name}"),
        };
        let dst = bundle.join("bin").join(file);
        fs::copy(exe, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", exe.display()));
        println!("{}", dst.display());
    }
    // The CLI, for `run.sh report` (`denseffn bench`).
    build_cli(&[], &bundle.join("bin").join("denseffn"));
    let bin = bundle.join("bin");
    if let Some(rev) = base {
        build_in_worktree(&root, rev, None, "base", &bin, false);
    }
    for (name, patch) in variants {
        build_in_worktree(&root, "HEAD", Some(patch), name, &bin, true);
    }
    fs::write(bundle.join("run.sh"), RUN_SH).unwrap();
    println!(
        "bundle ready: {} (carry it, then run `bash gpu-bundle/run.sh all`)",
        bundle.display()
    );
}

const RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs the bundled test and bench binaries on a GPU machine. Usage: run.sh [tests|gpu-tests|overlays|bench|all|sanitize|report|ab]
# gpu-tests: only the GPU test binaries (tests/gpu*.rs), the rest being CPU tests CI runs anyway.
# report [ARGS]: `denseffn bench ARGS --out $OUT/report` (bench.md, bench.json, SVG plots; all
# shapes and formats by default, e.g. `run.sh report --quick --shapes 8b`; ARGS must not repeat
# --backend or --out), its output in $OUT/report.log.
# ab [ARGS]: the A/B of one change: `denseffn bench --backend cuda ARGS` with bin/denseffn-base
# (`cargo xtask gpu-bundle --base REV`) into $OUT/ab-base, then with bin/denseffn into
# $OUT/ab-new, same GPU, one after the other; `denseffn compare` of the two into $OUT/ab.md.
# overlays: the all-formats overlay test one format at a time (DENSEFFN_GPU_TEST_OVERLAYS), each
# in its own process and log ($OUT/overlays-<format>.log): on full shapes the four together take
# longer than one device call may run.
# sanitize: the GPU test binaries on small shapes under compute-sanitizer memcheck, racecheck,
# initcheck and synccheck; each run's log goes to $OUT/sanitize-<tool>-<binary>.log and any
# error fails the run.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"; mkdir -p "$out"
mode="${1:-all}"
[ $# -gt 0 ] && shift
# cuBLAS for the bench anchors and NCCL for the tensor-parallel test (cudarc loads both at run
# time): PyTorch's wheels carry them. cudarc looks for `libnccl.so`, the wheel has
# `libnccl.so.2`: a link in a folder of our own bridges the names. NVLink multicast stays off.
libs="$(find / -xdev \( -name 'libcublas.so.1[0-9]*' -o -name 'libnccl.so.2*' \) -not -path '/proc/*' 2>/dev/null)"
lib="$(echo "$libs" | grep libcublas | head -n 1)"
[ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}"
nccl="$(echo "$libs" | grep libnccl | head -n 1)"
if [ -n "$nccl" ]; then
  mkdir -p /tmp/denseffn-nccl && ln -sf "$nccl" /tmp/denseffn-nccl/libnccl.so
  export LD_LIBRARY_PATH="/tmp/denseffn-nccl:${LD_LIBRARY_PATH:-}"
fi
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
rc=0
if [ "$mode" = tests ] || [ "$mode" = all ] || [ "$mode" = gpu-tests ]; then
  pattern="test-*"; [ "$mode" = gpu-tests ] && pattern="test-gpu*"
  for t in "$here"/bin/$pattern; do
    echo "== $(basename "$t")" | tee -a "$out/tests.log"
    "$t" --test-threads=1 --nocapture 2>&1 | tee -a "$out/tests.log" || rc=1
  done
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
  for b in "$here"/bin/bench-*; do
    echo "== $(basename "$b")" | tee -a "$out/bench.log"
    DENSEFFN_BENCH_OUT="$out/$(basename "$b").md" "$b" --bench 2>&1 | tee -a "$out/bench.log" || rc=1
  done
fi
if [ "$mode" = report ]; then
  mkdir -p "$out/report"
  "$here/bin/denseffn" bench --backend cuda --out "$out/report" "$@" 2>&1 | tee "$out/report.log" || rc=1
fi
if [ "$mode" = ab ]; then
  # bin/denseffn-base (`--base REV`) and bin/denseffn-NAME (`--variant NAME=PATCH`), each benched
  # after this build's bench, same GPU: ab.md = base → this build, ab-NAME.md = this build → NAME.
  others=$(cd "$here/bin" && ls denseffn-* 2>/dev/null)
  if [ -z "$others" ]; then
    echo "run.sh ab: no bin/denseffn-base or -NAME (cargo xtask gpu-bundle --base REV / --variant NAME=PATCH)"
    exit 2
  fi
  "$here/bin/denseffn" bench --backend cuda --out "$out/ab-new" "$@" > "$out/ab-new.log" 2>&1 || rc=1
  for o in $others; do
    v="${o#denseffn-}"
    "$here/bin/$o" bench --backend cuda --out "$out/ab-$v" "$@" > "$out/ab-$v.log" 2>&1 || rc=1
    if [ "$v" = base ]; then
      "$here/bin/denseffn" compare "$out/ab-base" "$out/ab-new" --out "$out/ab.md" || rc=1
    else
      "$here/bin/denseffn" compare "$out/ab-new" "$out/ab-$v" --out "$out/ab-$v.md" || rc=1
    fi
  done
fi
if [ "$mode" = overlays ]; then
  for f in q2 q4k fp8 bf16; do
    echo "== overlays $f" | tee -a "$out/overlays.log"
    DENSEFFN_GPU_TEST_OVERLAYS=$f "$here/bin/test-gpu" --test-threads=1 --nocapture \
      overlays_match > "$out/overlays-$f.log" 2>&1 || rc=1
    grep -E "test result|panicked" "$out/overlays-$f.log" | tee -a "$out/overlays.log"
  done
fi
if [ "$mode" = sanitize ]; then
  # Both GPU test binaries on small shapes. Skipped: the KV-cache tests (they allocate all free
  # device memory, which the sanitizers shadow) and the NCCL test (NCCL's own kernels).
  for tool in memcheck racecheck initcheck synccheck; do
    for t in "$here"/bin/test-gpu*; do
      log="$out/sanitize-$tool-$(basename "$t").log"
      echo "== compute-sanitizer --tool $tool $(basename "$t")" | tee -a "$out/sanitize.log"
      DENSEFFN_GPU_TEST_SMALL=1 compute-sanitizer --tool "$tool" --error-exitcode 1 \
        "$t" --test-threads=1 --skip kv_cache --skip tensor_parallel > "$log" 2>&1 || rc=1
      tail -n 3 "$log" | tee -a "$out/sanitize.log"
    done
  done
fi
# The device tool returns at most 8 files from $OUT: more are packed into $OUT/out.tgz.
if [ "$(find "$out" -type f | wc -l)" -gt 8 ]; then
  tar czf /tmp/denseffn-out.tgz -C "$out" . && rm -rf "${out:?}"/* && mv /tmp/denseffn-out.tgz "$out/out.tgz"
fi
exit $rc
"#;
