//! `denseffn compare BASE NEW`: two `bench.json` files of `denseffn bench`, row by row — the
//! A/B of one change, measured in the same session (ideally the same process run order), as a
//! markdown table of µs and relative change.
use denseffn::error::{Error, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Arguments of `denseffn compare`.
#[derive(clap::Args)]
pub struct CompareArgs {
    /// The baseline's bench.json (or the directory holding it).
    pub base: PathBuf,
    /// The changed build's bench.json (or the directory holding it).
    pub new: PathBuf,
    /// Also write the table to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// One timed row: (model, format, path) and its µs (decode: also graph-replayed µs).
#[derive(Debug, PartialEq)]
struct Row {
    key: (String, String, String),
    us: f64,
    graph_us: Option<f64>,
}

/// A loaded report: copy bandwidth, device, and its timed rows in file order (failed rows,
/// which carry `error`, are left out).
struct Report {
    device: String,
    copy_gbps: f64,
    rows: Vec<Row>,
}

fn load(path: &Path) -> Result<Report> {
    let file = if path.is_dir() {
        path.join("bench.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| Error::Invalid(format!("reading {}: {e}", file.display())))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| Error::Invalid(format!("{}: not JSON: {e}", file.display())))?;
    let bad = |what: &str| {
        Error::Invalid(format!(
            "{}: not a denseffn bench.json ({what})",
            file.display()
        ))
    };
    let copy_gbps = v["copy_GBps"].as_f64().ok_or_else(|| bad("no copy_GBps"))?;
    let device = v["device"].as_str().unwrap_or("?").to_string();
    let mut rows = Vec::new();
    for section in ["decode", "prefill"] {
        let list = v[section]
            .as_array()
            .ok_or_else(|| bad(&format!("no {section} list")))?;
        for r in list.iter().filter(|r| r.get("error").is_none()) {
            let s = |k: &str| r[k].as_str().map(str::to_string).ok_or_else(|| bad(k));
            rows.push(Row {
                key: (s("model")?, s("format")?, s("path")?),
                us: r["us"].as_f64().ok_or_else(|| bad("us"))?,
                graph_us: r["graph_us"].as_f64(),
            });
        }
    }
    Ok(Report {
        device,
        copy_gbps,
        rows,
    })
}

/// The row of `r` with `key`.
fn find<'a>(r: &'a Report, key: &(String, String, String)) -> Option<&'a Row> {
    r.rows.iter().find(|x| &x.key == key)
}

/// `100·(new/base − 1)` with a sign, one decimal.
fn change(base: f64, new: f64) -> String {
    format!("{:+.1}%", 100.0 * (new / base - 1.0))
}

/// The comparison table of two reports: rows present in both, in the new report's order, then
/// the rows only one of them has.
fn table(base: &Report, new: &Report) -> String {
    let mut md = format!(
        "Base: {} (copy {:.0} GB/s). New: {} (copy {:.0} GB/s). Negative change = faster.\n\n\
         | model | format | path | base µs | new µs | change | base graph µs | new graph µs | graph change |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        base.device, base.copy_gbps, new.device, new.copy_gbps
    );
    let mut only = Vec::new();
    for n in &new.rows {
        let (m, f, p) = &n.key;
        match find(base, &n.key) {
            Some(b) => {
                let graph = match (b.graph_us, n.graph_us) {
                    (Some(bg), Some(ng)) => format!("{bg:.1} | {ng:.1} | {}", change(bg, ng)),
                    _ => "– | – | –".into(),
                };
                md.push_str(&format!(
                    "| {m} | {f} | {p} | {:.1} | {:.1} | {} | {graph} |\n",
                    b.us,
                    n.us,
                    change(b.us, n.us)
                ));
            }
            None => only.push(format!("{m} {f} {p} (new only)")),
        }
    }
    for b in &base.rows {
        if find(new, &b.key).is_none() {
            let (m, f, p) = &b.key;
            only.push(format!("{m} {f} {p} (base only)"));
        }
    }
    if !only.is_empty() {
        md.push_str(&format!("\nNot compared: {}.\n", only.join(", ")));
    }
    md
}

/// Runs `denseffn compare`.
pub fn run(args: CompareArgs) -> Result<()> {
    let (base, new) = (load(&args.base)?, load(&args.new)?);
    let md = table(&base, &new);
    print!("{md}");
    if let Some(out) = &args.out {
        std::fs::write(out, &md)
            .map_err(|e| Error::Invalid(format!("writing {}: {e}", out.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(rows: &[(&str, f64, Option<f64>)]) -> Report {
        Report {
            device: "dev".into(),
            copy_gbps: 4000.0,
            rows: rows
                .iter()
                .map(|&(p, us, g)| Row {
                    key: ("m".into(), "nvfp4".into(), p.into()),
                    us,
                    graph_us: g,
                })
                .collect(),
        }
    }

    #[test]
    fn rows_are_matched_by_key_and_unmatched_ones_listed() {
        let base = report(&[("forward", 50.0, Some(48.0)), ("forward_k2", 60.0, None)]);
        let new = report(&[("forward", 45.0, Some(44.0)), ("forward_km(8)", 90.0, None)]);
        let md = table(&base, &new);
        assert!(
            md.contains("| m | nvfp4 | forward | 50.0 | 45.0 | -10.0% | 48.0 | 44.0 | -8.3% |"),
            "{md}"
        );
        assert!(md.contains("m nvfp4 forward_km(8) (new only)"), "{md}");
        assert!(md.contains("m nvfp4 forward_k2 (base only)"), "{md}");
        assert!(!md.contains("| forward_k2 |"), "{md}");
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let dir = std::env::temp_dir().join(format!("denseffn-compare-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = load(&dir.join("nope.json")).err().unwrap().to_string();
        assert!(missing.contains("nope.json"), "{missing}");
        let f = dir.join("bad.json");
        std::fs::write(&f, "{\"decode\": []}").unwrap();
        let e = load(&f).err().unwrap().to_string();
        assert!(e.contains("copy_GBps"), "{e}");
        std::fs::write(&f, "not json").unwrap();
        assert!(load(&f).err().unwrap().to_string().contains("not JSON"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
