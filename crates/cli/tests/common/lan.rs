//! A network of namespaces a test makes for itself: a namespace holding a bridge (the
//! switch), one namespace per host plugged into it by a veth pair, and a veth from the test's
//! own namespace (for agents in the test process) at 198.19.77.1. Host `k` is
//! 198.19.77.(10 + k). Needs root and `ip`; everything goes when the [`Lan`] is dropped.

use std::process::Command;

use super::text;

/// The address block (a benchmarking range, never routed).
const NET: &str = "198.19.77";

/// The namespaces and links of one test.
pub struct Lan {
    prefix: String,
    namespaces: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            text(&out.stderr).trim()
        ))
    }
}

impl Lan {
    /// `hosts` namespaces on one switch, or why they cannot be made (not root, no `ip`).
    pub fn create(hosts: usize) -> Result<Lan, String> {
        let prefix = format!("awq{}", std::process::id() % 100_000);
        let mut lan = Lan {
            prefix: prefix.clone(),
            namespaces: Vec::new(),
        };
        // On failure, drop(lan) removes what was made.
        lan.add_namespace(&format!("{prefix}-sw"))?;
        let switch = lan.namespaces[0].clone();
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &switch, "link", "set", "br0", "up"])?;
        for k in 0..hosts {
            let ns = lan.netns(k);
            lan.add_namespace(&ns)?;
            lan.plug(&format!("{prefix}p{k}"), Some(&ns), &Lan::addr(k))?;
        }
        lan.plug(&format!("{prefix}r"), None, &format!("{NET}.1"))?;
        Ok(lan)
    }

    /// Host `k`'s namespace.
    pub fn netns(&self, k: usize) -> String {
        format!("{}-{k}", self.prefix)
    }

    /// Host `k`'s address.
    pub fn addr(k: usize) -> String {
        format!("{NET}.{}", 10 + k)
    }

    fn add_namespace(&mut self, ns: &str) -> Result<(), String> {
        ip(&["netns", "add", ns])?;
        self.namespaces.push(ns.to_owned());
        ip(&["-n", ns, "link", "set", "lo", "up"])
    }

    /// A veth pair: `port` on the switch's bridge, its peer in namespace `host` (`None`: the
    /// test's own) at `addr`/24.
    fn plug(&self, port: &str, host: Option<&str>, addr: &str) -> Result<(), String> {
        let switch = &self.namespaces[0];
        let peer = match host {
            Some(_) => "eth0".to_owned(),
            None => format!("{port}x"),
        };
        let mut add = vec!["link", "add", port, "type", "veth", "peer", "name", &peer];
        if let Some(ns) = host {
            add.extend(["netns", ns]);
        }
        ip(&add)?;
        ip(&["link", "set", port, "netns", switch])?;
        ip(&["-n", switch, "link", "set", port, "master", "br0"])?;
        ip(&["-n", switch, "link", "set", port, "up"])?;
        let cidr = format!("{addr}/24");
        let in_host = |args: &[&str]| match host {
            Some(ns) => ip(&[&["-n", ns][..], args].concat()),
            None => ip(args),
        };
        in_host(&["addr", "add", &cidr, "dev", &peer])?;
        in_host(&["link", "set", &peer, "up"])
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veths in it, and so their peers.
        let _ = ip(&["link", "del", &format!("{}rx", self.prefix)]);
        for ns in self.namespaces.iter().rev() {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
