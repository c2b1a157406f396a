//! `agentwire serve`, `load` and `scorecard`: flags in, agentwire-load out, tables and charts
//! printed (feature `load`).

use std::time::Duration;

use anyhow::{bail, Context, Result};

use args::{LoadArgs, ScorecardArgs, ServeArgs};

use crate::*;

/// `agentwire serve`: starts the file server (see `agentwire_load::serve`) and waits for
/// Ctrl-C or SIGTERM.
pub(crate) fn serve(a: ServeArgs) -> Result<()> {
    let server = agentwire_load::serve::start(a.config())?;
    println!(
        "serving {} on https://{} (h3 on UDP, h2 and http/1.1 on TCP)",
        a.root.display(),
        server.local_addr()
    );
    let waiter = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the signal runtime")?;
    waiter.block_on(wait_for_signal());
    server.stop();
    Ok(())
}

/// `agentwire load`: runs the load generator (see `agentwire_load::load`) and prints its
/// report; fails when no request succeeded.
pub(crate) fn load(a: LoadArgs) -> Result<()> {
    // With --insecure, building the TLS configuration warns loudly on stderr.
    let mut config = a.config()?;
    let report = if a.no_progress || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        agentwire_load::load::run(&config)?
    } else {
        let live = std::sync::Arc::new(agentwire_load::load::LiveCounts::default());
        config.live = Some(live.clone());
        load_with_progress(&config, &live)?
    };
    if a.json {
        println!("{}", agentwire_load::report::to_json(&report)?);
        for (kind, n) in &report.errors_by_kind {
            let example = report.error_examples.get(kind).map(String::as_str);
            eprintln!("{kind}: {n} error(s), e.g. {}", example.unwrap_or("?"));
        }
    } else {
        print!("{}", agentwire_load::report::render_text(&report));
    }
    if report.succeeded == 0 {
        let first = report
            .error_examples
            .iter()
            .next()
            .map(|(k, e)| format!(": {k}: {e}"))
            .unwrap_or_default();
        bail!(
            "no request succeeded ({} sent, {} failed){first}",
            report.requests,
            report.errors
        );
    }
    Ok(())
}

/// Runs the load on its own thread while a progress bar on stderr shows time (or requests)
/// done, responses, errors and the current rate; the bar is cleared at the end.
pub(crate) fn load_with_progress(
    config: &agentwire_load::load::LoadConfig,
    live: &agentwire_load::load::LiveCounts,
) -> Result<agentwire_load::report::LoadReport> {
    use agentwire_load::load::Limit;
    let (length, by_time) = match config.limit {
        Limit::Duration(d) => (
            u64::try_from((config.warmup + d).as_millis()).unwrap_or(u64::MAX),
            true,
        ),
        Limit::Requests(n) => (n, false),
    };
    let bar = indicatif::ProgressBar::new(length);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:24}] {percent}%  {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let started = std::time::Instant::now();
    let result = std::thread::scope(|scope| {
        let worker = scope.spawn(|| agentwire_load::load::run(config));
        let mut last = (started, 0u64);
        while !worker.is_finished() {
            std::thread::sleep(Duration::from_millis(200));
            let (ok, failed) = live.snapshot();
            let now = std::time::Instant::now();
            let rate =
                (ok - last.1.min(ok)) as f64 / now.duration_since(last.0).as_secs_f64().max(1e-3);
            last = (now, ok);
            let done = if by_time {
                u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
            } else {
                ok + failed
            };
            bar.set_position(done.min(length));
            bar.set_message(format!("{ok} responses, {failed} errors, {rate:.0} req/s"));
        }
        worker
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the load thread panicked")))
    });
    bar.finish_and_clear();
    result
}

/// Writes each chart into `dir` and links it from `md`.
pub(crate) fn write_charts(
    dir: &std::path::Path,
    charts: &[agentwire_load::compare::Chart],
    md: &mut String,
) -> Result<()> {
    if !charts.is_empty() {
        md.push_str(
            "
Charts:

",
        );
    }
    for c in charts {
        let path = dir.join(&c.file);
        std::fs::write(&path, &c.svg).with_context(|| format!("writing {}", path.display()))?;
        md.push_str(&format!(
            "![{}]({})
",
            c.title, c.file
        ));
    }
    Ok(())
}

/// `agentwire scorecard --compare A.json B.json …`: the scorecards side by side, into
/// --out/compare.md (printed too) and charts.
pub(crate) fn scorecard_compare(a: &ScorecardArgs) -> Result<()> {
    use agentwire_load::compare;
    let cards = a
        .compare
        .iter()
        .map(|p| compare::CardView::load(p))
        .collect::<Result<Vec<_>>>()?;
    let sources: Vec<String> = a.compare.iter().map(|p| p.display().to_string()).collect();
    let mut md = compare::compare_markdown(&cards, &sources);
    write_charts(&a.out, &compare::compare_charts(&cards), &mut md)?;
    let path = a.out.join("compare.md");
    std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    print!("{md}");
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// `agentwire scorecard`: runs the scorecard (see `agentwire_load::scorecard`), writes
/// scorecard.json and scorecard.md into --out, prints the table (or the JSON), and fails
/// after writing everything if any scenario had errors.
pub(crate) fn scorecard(a: ScorecardArgs) -> Result<()> {
    use agentwire_load::{compare, scorecard};
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("creating the output directory {}", a.out.display()))?;
    if !a.compare.is_empty() {
        return scorecard_compare(&a);
    }
    let config = a.config()?;
    let mut progress = |r: &scorecard::ScenarioRun| {
        let problems = r.problems();
        eprintln!(
            "  {:<18} {:<8} {:>9.1} req/s {:>9.2} MB/s {:>7} requests{}",
            r.scenario,
            r.proto.name(),
            r.rps,
            r.mb_per_s,
            r.requests,
            if problems > 0 {
                format!("  {problems} ERROR(S)")
            } else {
                String::new()
            }
        );
    };
    eprintln!(
        "scorecard ({}) for {}:",
        config.scale.name,
        config
            .protos
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let card = scorecard::run(&config, &mut progress)?;
    let json = scorecard::to_json(&card)?;
    let mut md = scorecard::render_markdown(&card);
    let charts = compare::card_charts(&compare::CardView::of(&card)?);
    write_charts(&a.out, &charts, &mut md)?;
    let json_path = a.out.join("scorecard.json");
    let md_path = a.out.join("scorecard.md");
    std::fs::write(&json_path, format!("{json}\n"))
        .with_context(|| format!("writing {}", json_path.display()))?;
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    if a.json {
        println!("{json}");
    } else {
        print!("{md}");
    }
    eprintln!(
        "wrote {} and {} ({:.1} s)",
        json_path.display(),
        md_path.display(),
        card.elapsed_s
    );
    if card.total_errors > 0 {
        bail!(
            "{} error(s) in the scorecard (see the Errors section of {})",
            card.total_errors,
            md_path.display()
        );
    }
    Ok(())
}
