//! End-to-end: a tiny real benchmark (QUIC and WebSocket over loopback) rendered by
//! `report::write_all`, and the HTML page opened in headless Chromium, whose on-load check must
//! find every chart drawn. Checks rendering, never speed.
//!
//! Without a Chromium binary the browser part is skipped, except under CI (`CI` set), where
//! `.ci/run` must have installed it.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use agentwire_bench::{report, BenchTransport, HubLauncher, Report};

/// How long the browser may take before it is killed and the test fails.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(60);

/// The tiny real run (in-process hub; open loop and the priority probe included so their
/// tables and charts render too). Kept in one place: when `run`'s signature changes, only
/// this changes.
fn tiny_report() -> Report {
    let config = common::tiny(&[BenchTransport::Quic, BenchTransport::Wss]);
    agentwire_bench::run(
        &config,
        &HubLauncher::InProcess,
        vec!["test".into()],
        &mut |_| {},
    )
    .expect("tiny bench run")
}

fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// Runs headless Chromium on `page` and returns the DOM it dumps after the page's scripts ran.
fn dump_dom(browser: &Path, page: &Path, profile: &Path) -> String {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting chromium");
    // Read both pipes on threads so a chatty browser cannot block on a full pipe.
    let mut stdout = child.stdout.take().expect("stdout piped");
    let mut stderr = child.stderr.take().expect("stderr piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for chromium") {
            break status;
        }
        if start.elapsed() > BROWSER_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish within {BROWSER_TIMEOUT:?}; stderr:\n{}",
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let dom = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    assert!(
        status.success() && !dom.is_empty(),
        "chromium failed ({status}); stderr:\n{stderr}"
    );
    dom
}

#[test]
fn report_files_and_html_charts_render_in_chromium() {
    let report = tiny_report();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let files = report::write_all(&report, &out).unwrap();

    for p in [&files.json, &files.markdown, &files.html] {
        assert!(p.is_file(), "{} missing", p.display());
    }
    assert!(!files.charts.is_empty(), "no charts for a run with data");
    for p in &files.charts {
        assert!(p.is_file(), "{} missing", p.display());
        let svg = std::fs::read_to_string(p).unwrap();
        assert!(svg.starts_with("<svg"), "{}", p.display());
    }
    let md = std::fs::read_to_string(&files.markdown).unwrap();
    for t in ["quic", "wss"] {
        assert!(md.contains(&format!("| {t} | 0ms | 2 | 100 |")), "{md}");
    }
    for p in &files.charts {
        let name = p.file_name().unwrap().to_string_lossy();
        assert!(
            md.contains(&format!("(charts/{name})")),
            "{name} not in {md}"
        );
    }
    let html = std::fs::read_to_string(&files.html).unwrap();
    assert!(
        !html.contains("<link") && !html.contains(" src="),
        "external resource"
    );

    let Some(browser) = find_chromium() else {
        if std::env::var_os("CI").is_some() {
            panic!(
                "no chromium, chromium-browser or google-chrome on PATH: .ci/run must install \
                 chromium so the report's HTML charts are checked in a browser"
            );
        }
        println!("skipped: no chromium");
        return;
    };
    let profile = dir.path().join("chromium-profile");
    let html_path = files.html.canonicalize().unwrap();
    let dom = dump_dom(&browser, &html_path, &profile);
    let body = dom
        .lines()
        .find(|l| l.contains("<body"))
        .map(str::to_owned)
        .unwrap_or_else(|| dom.chars().take(2000).collect());
    assert!(
        dom.contains(&format!("data-charts=\"{}\"", files.charts.len())),
        "expected {} charts in the dumped DOM:\n{body}",
        files.charts.len()
    );
    assert!(
        dom.contains("data-check=\"ok\""),
        "the page's chart check did not pass:\n{body}"
    );
}
