//! An agent built with only some transports (agentwire's cargo features `quic`, `h2`, `ws`,
//! `unix`, `wt`) names the one left out when a hub address needs it, and tries the others as
//! before. Under the default features every transport is built in; CI also runs this file
//! with one transport alone:
//! `cargo test -p agentwire --no-default-features --features quic --test transports_built_in`.

use std::time::Duration;

use agentwire::{Agent, AgentOptions, HubTrust};

#[tokio::test]
async fn a_transport_left_out_of_the_build_is_named_and_the_others_are_tried() {
    let cases = [
        ("quic://127.0.0.1:9", "quic", cfg!(feature = "quic")),
        ("h2://127.0.0.1:9", "h2", cfg!(feature = "h2")),
        ("wss://127.0.0.1:9", "ws", cfg!(feature = "ws")),
        ("ws://127.0.0.1:9", "ws", cfg!(feature = "ws")),
        ("wt://127.0.0.1:9", "wt", cfg!(feature = "wt")),
        (
            "unix:///nonexistent/agentwire.sock",
            "unix",
            cfg!(feature = "unix"),
        ),
    ];
    for (url, feature, built_in) in cases {
        // Nothing listens there: every attempt fails, the question is how.
        let trust = HubTrust::pin(&"0".repeat(64)).unwrap();
        let mut opts = AgentOptions::new("a", url, trust);
        opts.connect_timeout = Duration::from_secs(2);
        let error = match Agent::connect(opts).await {
            Ok(_) => panic!("{url}: connected to nothing"),
            Err(e) => e.to_string(),
        };
        let named = format!("not built in (agentwire's cargo feature `{feature}`)");
        if built_in {
            assert!(!error.contains("not built in"), "{url}: {error}");
        } else {
            assert!(error.contains(&named), "{url}: {error}");
        }
    }
}
