//! `denseffn bench` end to end on the CPU reference backend (a tiny custom shape): the table
//! names every path of every format, bench.json and the SVG plots are written, `denseffn
//! compare` matches every row of two reports; bad options are clear errors. And the embedded ggml anchor table parses to the figures it holds.
use denseffn::bench::anchors::{self, Unit};
use denseffn::bench::formats::FORMATS;

mod common;
use common::denseffn_cli as denseffn;

#[test]
fn bench_on_the_cpu_writes_every_path_row_and_the_plots() {
    let dir = std::env::temp_dir().join(format!("denseffn-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cmd = "bench --backend cpu --hidden 256 --intermediate 512 --m 1..8 --n 4,8 --quick --out";
    let mut args: Vec<&str> = cmd.split(' ').collect();
    args.push(dir.to_str().unwrap());
    let out = denseffn(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let md = std::fs::read_to_string(dir.join("bench.md")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        md.trim(),
        "stdout = bench.md"
    );
    let shape = "custom-256x512";
    let mut paths = vec![
        "forward".to_string(),
        "forward_k2".into(),
        "forward_k3".into(),
    ];
    paths.extend((1..=8).map(|m| format!("forward_km({m})")));
    paths.extend([4, 8].map(|n| format!("forward_prefill({n})")));
    for f in FORMATS {
        for p in &paths {
            let row = format!("| {shape} | {} | {p} |", f.name);
            let line = md
                .lines()
                .find(|l| l.starts_with(&row))
                .unwrap_or_else(|| panic!("no row `{row}` in\n{md}"));
            assert!(!line.contains("not run"), "{line}");
        }
    }
    assert!(md.contains("÷ copy") && md.contains("÷ cuBLAS") && md.contains("graph µs"));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("bench.json")).unwrap()).unwrap();
    let decode = json["decode"].as_array().unwrap();
    assert_eq!(decode.len(), FORMATS.len() * 11);
    // time(m) ÷ time(1): one row per format and m, m = 1 exactly 1, each ratio the two timed
    // rows' quotient.
    let km = json["km_scaling"].as_array().unwrap();
    assert_eq!(km.len(), FORMATS.len() * 8);
    for k in km {
        let (f, m) = (k["format"].as_str().unwrap(), k["m"].as_u64().unwrap());
        let us = |path: &str| {
            decode
                .iter()
                .find(|d| d["format"] == f && d["path"] == path)
                .unwrap_or_else(|| panic!("no {f} {path} row"))["us"]
                .as_f64()
                .unwrap()
        };
        let km_m = us(&format!("forward_km({m})"));
        let want = km_m / us("forward_km(1)");
        assert!(
            (k["over_km1"].as_f64().unwrap() - want).abs() < 1e-12,
            "{k}"
        );
        let fw = k["over_forward"].as_f64().unwrap();
        assert!((fw - km_m / us("forward")).abs() < 1e-12, "{k}");
        if m == 1 {
            assert_eq!(k["over_km1"].as_f64().unwrap(), 1.0);
        }
    }
    assert!(md.contains("## forward_km scaling") && md.contains("÷ forward_km(1)"));
    for d in decode {
        assert!(d["us"].as_f64().unwrap() > 0.0, "{d}");
        assert!(
            d["graph_us"].as_f64().is_some(),
            "graph replay on the CPU backend: {d}"
        );
    }
    assert_eq!(json["prefill"].as_array().unwrap().len(), FORMATS.len() * 2);
    for kind in ["decode", "prefill"] {
        let svg = std::fs::read_to_string(dir.join(format!("{kind}-{shape}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{kind}"
        );
        assert!(
            svg.contains("<text") && svg.contains("ggml"),
            "{kind}: labels and the ggml line"
        );
        for f in FORMATS {
            assert!(svg.contains(f.name), "{kind}: legend names {}", f.name);
        }
    }
    // `denseffn compare` of the report with itself: every timed row matched, no change.
    let json = dir.join("bench.json");
    let cmp = dir.join("compare.md");
    let out = denseffn(&[
        "compare",
        dir.to_str().unwrap(),
        json.to_str().unwrap(),
        "--out",
        cmp.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = std::fs::read_to_string(&cmp).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), table);
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("| custom"))
        .collect();
    assert_eq!(rows.len(), FORMATS.len() * (11 + 2), "{table}");
    assert!(
        rows.iter().all(|l| l.contains("| +0.0% |")),
        "a report differs from itself:\n{table}"
    );
    assert!(!table.contains("Not compared"), "{table}");
    let bad = denseffn(&["compare", json.to_str().unwrap(), "/nonexistent/bench.json"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/nonexistent/bench.json"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_rejects_bad_options_with_a_message() {
    for (args, says) in [
        (&["--shapes", "13b"][..], "unknown `13b`"),
        (&["--formats", "q9"][..], "unknown `q9`"),
        (&["--m", "0..3"][..], "--m"),
        (&["--m", "1..9"][..], "--m"),
        (&["--n", "0"][..], "N must be at least 1"),
    ] {
        let mut a = vec!["bench", "--backend", "cpu", "--quick", "--out"];
        let dir = std::env::temp_dir().join("denseffn-bench-bad");
        a.push(dir.to_str().unwrap());
        a.extend_from_slice(args);
        let out = denseffn(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn the_ggml_anchor_table_parses() {
    let points = anchors::ggml_h200().unwrap();
    assert_eq!(points.len(), 49, "7 types × n = 1, 2, 3, 4, 5, 8, 512");
    let nvfp4 = anchors::series(&points, "nvfp4", Unit::GBps);
    assert_eq!(
        nvfp4,
        [
            (1, 2087.0),
            (2, 1977.0),
            (3, 1639.0),
            (4, 1360.0),
            (5, 1211.0),
            (8, 842.0)
        ]
    );
    assert_eq!(
        anchors::series(&points, "nvfp4", Unit::Tflops),
        [(512, 134.0)]
    );
    assert_eq!(
        anchors::series(&points, "bf16", Unit::Tflops),
        [(512, 507.0)]
    );
    let q4k = points.iter().find(|p| p.ty == "q4_K" && p.n == 1).unwrap();
    assert_eq!((q4k.us, q4k.value), (16.43, 2010.0));
    // Every format the bench draws has ggml figures for decode and prefill.
    for f in FORMATS {
        assert!(
            !anchors::series(&points, f.ggml, Unit::GBps).is_empty(),
            "{}",
            f.ggml
        );
        assert_eq!(
            anchors::series(&points, f.ggml, Unit::Tflops).len(),
            1,
            "{}",
            f.ggml
        );
    }
}

#[test]
fn a_bad_anchor_row_is_an_error_naming_its_line() {
    let md = "| type | n | us | v |\n|---|---|---|---|\n| nvfp4 | 1 | 15.8 | 2087 GB/s |\n| nvfp4 | 2 | x | 1977 GB/s |\n";
    let e = anchors::parse(md).unwrap_err().to_string();
    assert!(e.contains("line 4") && e.contains("µs"), "{e}");
    let e = anchors::parse("| nvfp4 | 1 | 15.8 | 2087 furlongs |")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unit"), "{e}");
    assert!(anchors::parse("no table here").is_err());
}
