//! Records the git commit the benchmark binary was built from, so results carry it wherever
//! the binary runs, and the locked versions of the crates that decide the numbers.
fn main() {
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs");
    let sha = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    println!("cargo:rustc-env=AGENTWIRE_BUILD_GIT_SHA={sha}");

    // Versions of the crates that decide the numbers, as locked for this build.
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    const WANTED: [&str; 9] = [
        "quinn",
        "quinn-proto",
        "quinn-udp",
        "rustls",
        "ring",
        "h2",
        "tokio",
        "tokio-tungstenite",
        "tungstenite",
    ];
    let lock = std::fs::read_to_string("../../Cargo.lock").unwrap_or_default();
    let mut versions = Vec::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_owned());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take()) {
            if WANTED.contains(&n.as_str()) {
                versions.push(format!("{n}={}", v.trim_matches('"')));
            }
        }
    }
    println!(
        "cargo:rustc-env=AGENTWIRE_BUILD_CRATE_VERSIONS={}",
        versions.join(";")
    );
}
