//! Spec-string parser tests.

use std::time::Duration;

use agentwire_netsim::{Error, GilbertElliott, JitterDist, QueueLimit, Spec};

#[test]
fn parses_the_documented_example() {
    let spec: Spec = "delay=25ms,jitter=2ms,loss=1%,rate=100mbit,queue=1bdp,reorder=0.5%,dup=0.1%,ge=0.01/0.3/0/0.5,seed=42"
        .parse()
        .unwrap();
    let imp = &spec.impairment;
    assert_eq!(spec.seed, Some(42));
    assert_eq!(imp.delay, Duration::from_millis(25));
    assert_eq!(imp.jitter, Duration::from_millis(2));
    assert!((imp.loss - 0.01).abs() < 1e-12);
    assert_eq!(imp.rate_bps, Some(100_000_000));
    assert_eq!(imp.queue, QueueLimit::Bdp(1.0));
    assert!((imp.reorder - 0.005).abs() < 1e-12);
    assert!((imp.duplicate - 0.001).abs() < 1e-12);
    assert_eq!(
        imp.gilbert_elliott,
        Some(GilbertElliott {
            p: 0.01,
            r: 0.3,
            loss_good: 0.0,
            loss_bad: 0.5
        })
    );
    // 100 Mbit/s × 50 ms = 625 000 bytes.
    assert_eq!(imp.queue_limit_bytes(), Some(625_000));
}

#[test]
fn parses_other_forms() {
    let spec: Spec = " delay=1.5ms , jitter=250us, jitter_dist=normal, jitter_reorders=yes, rate=1.5gbit/s, queue=64kib, reorder_delay=3ms, dup_delay=10ns, loss=0.02 "
        .parse()
        .unwrap();
    let imp = spec.impairment;
    assert_eq!(imp.delay, Duration::from_micros(1500));
    assert_eq!(imp.jitter, Duration::from_micros(250));
    assert_eq!(imp.jitter_dist, JitterDist::Normal);
    assert!(imp.jitter_reorders);
    assert_eq!(imp.rate_bps, Some(1_500_000_000));
    assert_eq!(imp.queue, QueueLimit::Bytes(65_536));
    assert_eq!(imp.reorder_delay, Duration::from_millis(3));
    assert_eq!(imp.duplicate_delay, Duration::from_nanos(10));
    assert!((imp.loss - 0.02).abs() < 1e-12);
    assert_eq!(spec.seed, None);
    assert_eq!(Spec::parse("").unwrap(), Spec::default());
}

/// Each bad input fails and the error message names the key.
#[test]
fn rejects_bad_input_naming_the_key() {
    let cases: &[(&str, &str)] = &[
        ("delay=25", "delay"),              // missing unit
        ("delay=25parsecs", "delay"),       // bad unit
        ("delay=-5ms", "delay"),            // negative
        ("jitter=abc", "jitter"),           // not a number
        ("loss=101%", "loss"),              // percent > 100
        ("loss=1.5", "loss"),               // fraction > 1
        ("loss=5x", "loss"),                // bad unit
        ("reorder=200%", "reorder"),        // percent > 100
        ("dup=-1%", "dup"),                 // negative
        ("rate=100", "rate"),               // missing unit
        ("rate=100mbps", "rate"),           // ambiguous bytes/bits
        ("rate=0mbit", "rate"),             // zero
        ("queue=1xdp,rate=1mbit", "queue"), // bad unit
        ("queue=1bdp", "queue"),            // queue without rate
        ("ge=0.1/0.2/0.3", "ge"),           // too few values
        ("ge=0.1/0.2/0.3/120%", "ge"),      // component > 100 %
        ("jitter_dist=pareto", "jitter_dist"),
        ("jitter_reorders=maybe", "jitter_reorders"),
        ("seed=-1", "seed"),
        ("bandwidth=1mbit", "bandwidth"), // unknown key
        ("delay", "delay"),               // missing value
        ("delay=", "delay"),              // empty value
        ("delay=1ms,delay=2ms", "delay"), // duplicate
    ];
    for (input, key) in cases {
        let err = Spec::parse(input).expect_err(input);
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("`{key}`")),
            "{input:?}: error {msg:?} does not name `{key}`"
        );
    }
}

#[test]
fn error_variants_are_specific() {
    assert_eq!(
        Spec::parse("foo=1").unwrap_err(),
        Error::UnknownKey { key: "foo".into() }
    );
    assert_eq!(
        Spec::parse("loss").unwrap_err(),
        Error::MissingValue { key: "loss".into() }
    );
    assert_eq!(
        Spec::parse("seed=1,seed=2").unwrap_err(),
        Error::DuplicateKey { key: "seed".into() }
    );
    let Error::InvalidValue { key, value, reason } = Spec::parse("loss=150%").unwrap_err() else {
        panic!("expected InvalidValue")
    };
    assert_eq!((key.as_str(), value.as_str()), ("loss", "150%"));
    assert!(reason.contains("above 100%"), "{reason}");
}
