//! Parser for CLI-style impairment specs.

use std::collections::HashSet;
use std::str::FromStr;
use std::time::Duration;

use crate::{Error, GilbertElliott, Impairment, JitterDist, QueueLimit};

pub(crate) const KNOWN_KEYS: &[&str] = &[
    "delay",
    "jitter",
    "jitter_dist",
    "jitter_reorders",
    "loss",
    "ge",
    "rate",
    "queue",
    "reorder",
    "reorder_delay",
    "dup",
    "dup_delay",
    "seed",
];

/// A parsed CLI-style impairment spec: the [`Impairment`] plus an optional seed.
///
/// The format is comma-separated `key=value` items (whitespace around items is ignored, an
/// empty string is no impairment, each key at most once):
///
/// | key | value | example |
/// |---|---|---|
/// | `delay` | duration (`ns`, `us`, `ms`, `s`; decimals allowed) | `delay=25ms` |
/// | `jitter` | duration | `jitter=2ms` |
/// | `jitter_dist` | `uniform` or `normal` | `jitter_dist=normal` |
/// | `jitter_reorders` | `true`/`false` (also `yes`/`no`, `1`/`0`) | `jitter_reorders=true` |
/// | `loss` | probability: `N%` or a fraction in `[0, 1]` | `loss=1%` |
/// | `ge` | Gilbert–Elliott `p/r/loss_good/loss_bad`, each a probability | `ge=0.01/0.3/0/0.5` |
/// | `rate` | bit/s with unit `bit`, `kbit`, `mbit`, `gbit` (decimal) | `rate=100mbit` |
/// | `queue` | `N` bytes (`b`, `kb`, `mb`, `kib`, `mib`), `Xbdp`, or `unlimited` | `queue=1bdp` |
/// | `reorder` | probability | `reorder=0.5%` |
/// | `reorder_delay` | duration (default 10 ms) | `reorder_delay=5ms` |
/// | `dup` | probability | `dup=0.1%` |
/// | `dup_delay` | duration (default 0) | `dup_delay=100us` |
/// | `seed` | `u64` | `seed=42` |
///
/// `bps` is rejected on purpose: `tc` reads it as *bytes* per second.
///
/// ```
/// use std::time::Duration;
/// use agentwire_netsim::{QueueLimit, Spec};
///
/// let spec: Spec = "delay=25ms,jitter=2ms,loss=1%,rate=100mbit,queue=1bdp,reorder=0.5%,dup=0.1%,ge=0.01/0.3/0/0.5,seed=42"
///     .parse()
///     .unwrap();
/// assert_eq!(spec.seed, Some(42));
/// assert_eq!(spec.impairment.delay, Duration::from_millis(25));
/// assert_eq!(spec.impairment.queue, QueueLimit::Bdp(1.0));
///
/// let err = "delay=25parsecs".parse::<Spec>().unwrap_err();
/// assert!(err.to_string().contains("`delay`"));
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Spec {
    /// The impairment described by the spec (validated).
    pub impairment: Impairment,
    /// The `seed=` value, if given.
    pub seed: Option<u64>,
}

impl Spec {
    /// Parses a spec string; see the [type docs](Spec) for the format.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let mut spec = Spec::default();
        let mut seen = HashSet::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), v.trim()),
                None => (item, ""),
            };
            if !KNOWN_KEYS.contains(&key) {
                return Err(Error::UnknownKey { key: key.into() });
            }
            if value.is_empty() {
                return Err(Error::MissingValue { key: key.into() });
            }
            if !seen.insert(key) {
                return Err(Error::DuplicateKey { key: key.into() });
            }
            let bad = |reason: String| Error::InvalidValue {
                key: key.into(),
                value: value.into(),
                reason,
            };
            let imp = &mut spec.impairment;
            match key {
                "delay" => imp.delay = parse_duration(value).map_err(bad)?,
                "jitter" => imp.jitter = parse_duration(value).map_err(bad)?,
                "jitter_dist" => {
                    imp.jitter_dist = match value.to_ascii_lowercase().as_str() {
                        "uniform" => JitterDist::Uniform,
                        "normal" => JitterDist::Normal,
                        _ => return Err(bad("expected `uniform` or `normal`".into())),
                    }
                }
                "jitter_reorders" => imp.jitter_reorders = parse_bool(value).map_err(bad)?,
                "loss" => imp.loss = parse_prob(value).map_err(bad)?,
                "ge" => imp.gilbert_elliott = Some(parse_ge(value).map_err(bad)?),
                "rate" => imp.rate_bps = Some(parse_rate(value).map_err(bad)?),
                "queue" => imp.queue = parse_queue(value).map_err(bad)?,
                "reorder" => imp.reorder = parse_prob(value).map_err(bad)?,
                "reorder_delay" => imp.reorder_delay = parse_duration(value).map_err(bad)?,
                "dup" => imp.duplicate = parse_prob(value).map_err(bad)?,
                "dup_delay" => imp.duplicate_delay = parse_duration(value).map_err(bad)?,
                "seed" => {
                    spec.seed = Some(
                        value
                            .parse()
                            .map_err(|_| bad("expected an unsigned 64-bit integer".into()))?,
                    )
                }
                _ => unreachable!("key checked against KNOWN_KEYS"),
            }
        }
        spec.impairment.validate()?;
        Ok(spec)
    }
}

impl FromStr for Spec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Spec::parse(s)
    }
}

/// Splits `"25ms"` into `(25.0, "ms")`. The unit is lower-cased.
fn split_number(v: &str) -> Result<(f64, String), String> {
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(end);
    if num.is_empty() {
        return Err("expected a number".into());
    }
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{num}` is not a number"))?;
    if !n.is_finite() {
        return Err("number must be finite".into());
    }
    if n < 0.0 {
        return Err("must not be negative".into());
    }
    Ok((n, unit.trim().to_ascii_lowercase()))
}

fn scale(n: f64, unit_factor: f64, what: &str) -> Result<u64, String> {
    let v = (n * unit_factor).round();
    if v >= u64::MAX as f64 {
        return Err(format!("{what} too large"));
    }
    Ok(v as u64)
}

fn parse_duration(v: &str) -> Result<Duration, String> {
    let (n, unit) = split_number(v)?;
    let ns_per_unit = match unit.as_str() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "" => return Err("missing unit (use ns, us, ms or s)".into()),
        u => return Err(format!("unknown duration unit `{u}` (use ns, us, ms or s)")),
    };
    Ok(Duration::from_nanos(scale(n, ns_per_unit, "duration")?))
}

fn parse_prob(v: &str) -> Result<f64, String> {
    let (n, unit) = split_number(v)?;
    match unit.as_str() {
        "%" if n > 100.0 => Err(format!("percentage {n}% is above 100%")),
        "%" => Ok(n / 100.0),
        "" if n > 1.0 => Err(format!(
            "fraction {n} is above 1 (write `{n}%` for a percentage)"
        )),
        "" => Ok(n),
        u => Err(format!(
            "unknown unit `{u}` (use `N%` or a fraction in [0, 1])"
        )),
    }
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

fn parse_ge(v: &str) -> Result<GilbertElliott, String> {
    let parts: Vec<&str> = v.split('/').map(str::trim).collect();
    if parts.len() != 4 {
        return Err(format!(
            "expected 4 values `p/r/loss_good/loss_bad`, got {}",
            parts.len()
        ));
    }
    let names = ["p", "r", "loss_good", "loss_bad"];
    let mut vals = [0.0; 4];
    for (i, part) in parts.iter().enumerate() {
        vals[i] = parse_prob(part).map_err(|e| format!("{}: {e}", names[i]))?;
    }
    Ok(GilbertElliott {
        p: vals[0],
        r: vals[1],
        loss_good: vals[2],
        loss_bad: vals[3],
    })
}

fn parse_rate(v: &str) -> Result<u64, String> {
    let (n, unit) = split_number(v)?;
    let unit = unit.strip_suffix("/s").unwrap_or(&unit);
    let factor = match unit {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "" => return Err("missing unit (use bit, kbit, mbit or gbit)".into()),
        u if u.ends_with("bps") => {
            return Err(format!(
                "`{u}` is ambiguous (tc reads it as bytes/s); use bit, kbit, mbit or gbit"
            ))
        }
        u => {
            return Err(format!(
                "unknown rate unit `{u}` (use bit, kbit, mbit or gbit)"
            ))
        }
    };
    let bps = scale(n, factor, "rate")?;
    if bps == 0 {
        return Err("rate must be positive".into());
    }
    Ok(bps)
}

fn parse_queue(v: &str) -> Result<QueueLimit, String> {
    if matches!(
        v.to_ascii_lowercase().as_str(),
        "unlimited" | "none" | "inf"
    ) {
        return Ok(QueueLimit::Unlimited);
    }
    let (n, unit) = split_number(v)?;
    let factor = match unit.as_str() {
        "bdp" => return Ok(QueueLimit::Bdp(n)),
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        u => {
            return Err(format!(
                "unknown queue unit `{u}` (use b, kb, mb, kib, mib or bdp)"
            ))
        }
    };
    Ok(QueueLimit::Bytes(scale(n, factor, "queue size")?))
}
