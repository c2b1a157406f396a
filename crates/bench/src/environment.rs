//! What machine and build a benchmark ran on: CPU model, cores, kernel, git commit, rustc
//! version and build profile, recorded into the report so numbers can be compared honestly.
//!
//! Every probe is best-effort: a missing file or tool gives `None`, never an error. This module
//! must not measure anything or influence the run.

use std::process::Command;

use serde::Serialize;

/// The machine and build a benchmark ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    /// `model name` from `/proc/cpuinfo`, if readable.
    pub cpu_model: Option<String>,
    /// Cores available to this process.
    pub cores: usize,
    /// Kernel release from `/proc/sys/kernel/osrelease`, if readable.
    pub kernel: Option<String>,
    /// The commit the binary was built from (recorded at build time), else `git rev-parse
    /// HEAD` in the current directory.
    pub git_sha: Option<String>,
    /// `rustc --version`, if rustc is on the PATH (the toolchain now, not necessarily the one
    /// that built this binary).
    pub rustc: Option<String>,
    /// `"release"` or `"debug"` (whether debug assertions were compiled in).
    pub build_profile: &'static str,
    /// Operating system and architecture this binary was built for.
    pub target: String,
}

/// `"debug"` when this crate was compiled with debug assertions, else `"release"`.
pub fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

impl Environment {
    /// Probes the current machine.
    pub fn detect() -> Self {
        Environment {
            cpu_model: cpu_model(),
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty()),
            git_sha: Some(env!("AGENTWIRE_BUILD_GIT_SHA"))
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .or_else(|| command_line_output("git", &["rev-parse", "HEAD"])),
            rustc: command_line_output("rustc", &["--version"]),
            build_profile: build_profile(),
            target: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        }
    }
}

fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    parse_cpu_model(&text)
}

/// The first `model name` value in `/proc/cpuinfo` text.
fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name")
            .then(|| value.trim().to_owned())
            .filter(|v| !v.is_empty())
    })
}

/// First line of a command's stdout when it exits successfully.
fn command_line_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout)
        .ok()?
        .lines()
        .next()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_is_parsed() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Example CPU @ 2.0GHz\n\nprocessor\t: 1\nmodel name\t: Example CPU @ 2.0GHz\n";
        assert_eq!(
            parse_cpu_model(text).as_deref(),
            Some("Example CPU @ 2.0GHz")
        );
        assert_eq!(parse_cpu_model("processor : 0\n"), None);
    }

    #[test]
    fn detect_does_not_fail() {
        let env = Environment::detect();
        assert!(env.cores >= 1);
        assert!(env.build_profile == "debug" || env.build_profile == "release");
    }
}
