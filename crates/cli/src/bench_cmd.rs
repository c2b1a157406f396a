//! `agentwire bench`: the benchmark run from flags, with its progress, verdict, table and files
//! (feature `bench`).

use anyhow::{bail, Context, Result};

use args::BenchArgs;

use crate::*;

pub(crate) async fn bench(a: BenchArgs) -> Result<()> {
    if agentwire_bench::build_profile() == "debug" {
        if !a.allow_debug {
            bail!(
                "this is a DEBUG build, whose numbers are meaningless: run \
                 `cargo run --release -p agentwire-cli -- bench` (or pass --allow-debug for tests)"
            );
        }
        eprintln!("WARNING: DEBUG build: these numbers are meaningless (--allow-debug)");
    }
    let config = a.config()?;
    for name in agentwire_bench::netpath::remove_stale_namespaces() {
        eprintln!("removed network namespace {name} left behind by an earlier run");
    }
    // Interrupted: remove this run's namespaces (their destructors will not run); the hub
    // processes die with us.
    tokio::spawn(async {
        wait_for_signal().await;
        let n = agentwire_bench::netpath::remove_own_namespaces();
        eprintln!("interrupted: removed {n} network namespace(s); partial results are not written");
        std::process::exit(130);
    });
    // The hub runs this very binary: /proc/self/exe stays valid even if the file is rebuilt
    // while a long run is going on (the path would then name a different binary).
    let exe = std::path::PathBuf::from("/proc/self/exe");
    if !exe.exists() {
        bail!("/proc/self/exe is missing: the bench needs Linux's /proc to start its hub");
    }
    let launcher = agentwire_bench::HubLauncher::Process(exe);
    let no_progress = a.no_progress;
    let command_line: Vec<String> = std::env::args().collect();
    let report = tokio::task::spawn_blocking(move || {
        let bar = indicatif::ProgressBar::new(0);
        if no_progress {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:24}] {pos}/{len} runs, {eta} left  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        let hidden = bar.is_hidden();
        let result = agentwire_bench::run(&config, &launcher, command_line, &mut |p| {
            bar.set_length(p.total_runs as u64);
            bar.set_position(p.finished_runs as u64);
            let line = format!(
                "cell {}/{}, run {}/{}: {}",
                p.cell, p.cells, p.repetition, p.repetitions, p.label
            );
            if hidden {
                eprintln!("{line}");
            } else {
                bar.set_message(line);
            }
        });
        bar.finish_and_clear();
        result
    })
    .await
    .context("the bench thread failed")??;
    if a.json {
        println!("{}", agentwire_bench::to_json(&report)?);
    } else {
        // Who won on each network first, the table after.
        print!("{}", agentwire_bench::verdict::render_text(&report));
        println!();
        print!("{}", agentwire_bench::render_table(&report));
    }
    let inconsistent = report.cells.iter().filter(|c| !c.consistent).count();
    if inconsistent > 0 {
        eprintln!("WARNING: {inconsistent} cell(s) did not account for every request");
    }
    for c in &report.cells {
        for f in &c.failures {
            eprintln!("WARNING: {}: {f}", agentwire_bench::cell_label(&c.config));
        }
    }
    let files = agentwire_bench::report::write_all(&report, &a.out)?;
    eprintln!(
        "results: {} (JSON), {} (Markdown), {} (HTML), {} charts in {}",
        files.json.display(),
        files.markdown.display(),
        files.html.display(),
        files.charts.len(),
        a.out.join("charts").display()
    );
    Ok(())
}
