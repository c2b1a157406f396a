//! Numbers, sizes, names and times as text, the same way in every output.
//!
//! This module owns formatting only.

/// Shown where the report has no value.
pub(crate) const NONE: &str = "–";

pub(crate) fn fmt_num(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        NONE.to_owned()
    }
}

pub(crate) fn opt_num(v: Option<f64>, digits: usize) -> String {
    v.map_or(NONE.to_owned(), |v| fmt_num(v, digits))
}

pub(crate) fn opt_str(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| NONE.to_owned())
}

/// `100 B`, `1 KiB`, `1536 B`, `2 MiB`.
pub(crate) fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// A file-name-safe form of a network profile name: `50ms+1%` → `50ms_1pct`.
pub(crate) fn slug(s: &str) -> String {
    let mut out = String::new();
    for ch in s.chars() {
        match ch {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => out.push(ch),
            '+' => out.push('_'),
            '%' => out.push_str("pct"),
            _ => out.push('-'),
        }
    }
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, 'n');
    }
    out
}

/// The command line as a shell would take it back: arguments quoted where needed.
pub(crate) fn shell_join(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars().all(|c| {
                    c.is_ascii_alphanumeric()
                        || matches!(c, '-' | '_' | '.' | '/' | '=' | ',' | ':' | '+' | '%' | '@')
                });
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `YYYY-MM-DD HH:MM:SS UTC` of Unix seconds (the `time` crate's calendar; a time it cannot
/// represent is shown as the seconds).
pub(crate) fn utc_time(unix: u64) -> String {
    let Some(t) = i64::try_from(unix)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
    else {
        return format!("{unix} s after 1970 UTC");
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}
