//! The embedded PTX assembles for sm_90 with ptxas, every entry point the layer uses is in it,
//! and no entry point has spills or a stack frame.
//!
//! ptxas comes from `$DENSEFFN_PTXAS` or `PATH` (`.ci/run` installs it from PyPI). Without it
//! the test fails under CI (`CI` set) and skips with a message elsewhere.
use std::collections::HashMap;
use std::process::Command;

fn ptxas() -> Option<String> {
    if let Ok(p) = std::env::var("DENSEFFN_PTXAS") {
        return Some(p);
    }
    Command::new("ptxas")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| "ptxas".into())
}

/// (stack bytes, spill store bytes, spill load bytes, registers) per entry point.
fn assemble() -> Option<HashMap<String, (u32, u32, u32, u32)>> {
    let Some(ptxas) = ptxas() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "ptxas not found under CI: set DENSEFFN_PTXAS or PATH"
        );
        eprintln!("skipping: ptxas not found (set DENSEFFN_PTXAS)");
        return None;
    };
    let dir = std::env::temp_dir().join(format!("denseffn-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("kernels.ptx");
    std::fs::write(&src, denseffn::PTX).unwrap();
    let out = Command::new(&ptxas)
        .args(["-arch=sm_90a", "-v"])
        .arg(&src)
        .arg("-o")
        .arg(dir.join("k.cubin"))
        .output()
        .expect("run ptxas");
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ptxas failed:\n{log}");
    let mut res = HashMap::new();
    let mut current: Option<String> = None;
    let num = |s: &str, key: &str| -> u32 {
        let i = s.find(key).unwrap();
        s[..i].split_whitespace().last().unwrap().parse().unwrap()
    };
    for line in log.lines() {
        if let Some(i) = line.find("Compiling entry function '") {
            let rest = &line[i + 26..];
            current = Some(rest[..rest.find('\'').unwrap()].to_string());
        } else if line.contains("bytes stack frame") {
            let name = current.clone().unwrap();
            let e = res.entry(name).or_insert((0, 0, 0, 0));
            e.0 = num(line, "bytes stack frame");
            e.1 = num(line, "bytes spill stores");
            e.2 = num(line, "bytes spill loads");
        } else if line.contains("Used") && line.contains("registers") {
            if let Some(name) = &current {
                let regs = line
                    .split("Used ")
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                res.get_mut(name).unwrap().3 = regs;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Some(res)
}

#[test]
fn every_kernel_assembles_for_sm90_without_spills_or_stack() {
    let Some(k) = assemble() else { return };
    // Every kernel the library dispatches to (the CPU reference executes exactly that set).
    for &name in denseffn::backend::CpuBackend::kernels() {
        assert!(
            k.contains_key(name),
            "entry point {name} missing from the PTX; have {:?}",
            k.keys()
        );
    }
    for (name, &(stack, st, ld, regs)) in &k {
        eprintln!("{name}: {regs} registers, {stack} B stack, {st}/{ld} B spill stores/loads");
        assert_eq!(
            (stack, st, ld),
            (0, 0, 0),
            "{name} has a stack frame or spills"
        );
    }
}
