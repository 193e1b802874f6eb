//! The `denseffn run` main job end to end on the CPU backend: every path, JSON table, --input and
//! --output files, a bad input file.

mod common;
use common::denseffn_cli as denseffn;

#[test]
fn run_checks_every_path_and_writes_the_prefill_output() {
    let dir = std::env::temp_dir().join(format!("denseffn-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (h, t) = (128usize, 3usize);
    let x: Vec<u8> = (0..h * t)
        .flat_map(|i| (((i * 37) % 17) as f32 / 8.0 - 1.0).to_le_bytes())
        .collect();
    let (xin, yout) = (dir.join("x.f32"), dir.join("y.f32"));
    std::fs::write(&xin, &x).unwrap();
    let out = denseffn(&[
        "run",
        "--backend",
        "cpu",
        "--hidden",
        "128",
        "--intermediate",
        "256",
        "--tokens",
        "3",
        "--json",
        "--input",
        xin.to_str().unwrap(),
        "--output",
        yout.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let paths: Vec<&str> = rows.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        [
            "forward",
            "forward_batched(3)",
            "forward_k2",
            "forward_k3",
            "forward_km(1)",
            "forward_km(2)",
            "forward_km(3)",
            "forward_prefill(3)"
        ]
    );
    for r in rows {
        let e = r["rel_err_vs_f64"].as_f64().unwrap();
        assert!(e > 0.0 && e < 1e-2, "{r}");
        assert!(r["launches"].as_u64().unwrap() >= 2, "{r}");
    }
    assert_eq!(rows.last().unwrap()["arm"], "nvfp4_t_m128");
    let y = std::fs::read(&yout).unwrap();
    assert_eq!(y.len(), h * t * 4);
    assert!(y
        .chunks_exact(4)
        .all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite()));

    // An input file of the wrong length: a clear error, exit code 1.
    std::fs::write(&xin, &x[..100]).unwrap();
    let out = denseffn(&[
        "run",
        "--backend",
        "cpu",
        "--hidden",
        "128",
        "--intermediate",
        "256",
        "--tokens",
        "3",
        "--input",
        xin.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("expected 1536"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `denseffn run --model` on a GGUF Q4_K layer (written by the `gguf` Python package) runs every
/// path on the Q4_K weight set and checks it against the f64 reference of ggml's values.
#[test]
fn run_on_a_gguf_q4k_layer_uses_the_q4k_weight_set() {
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/gguf_tiny/model.gguf"
    );
    let out = denseffn(&[
        "run",
        "--backend",
        "cpu",
        "--model",
        model,
        "--layer",
        "0",
        "--tokens",
        "9",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("Q4K layer 0"));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 13, "{rows:?}");
    for r in rows {
        let e = r["rel_err_vs_f64"].as_f64().unwrap();
        assert!(e > 0.0 && e < 1e-2, "{r}");
    }
    assert_eq!(rows.last().unwrap()["arm"], "q4k_gemm");
}
