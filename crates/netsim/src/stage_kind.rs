//! The name of a packet stage (`--stage bridge|nfqueue`), on every platform; the stages
//! themselves are Linux's (`stage`).
//!
//! This module owns the names only.

/// A packet stage, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StageKind {
    /// The bridge stage: frames forwarded between two veth pairs over AF_PACKET sockets.
    #[default]
    Bridge,
    /// The NFQUEUE stage: packets held in an NFQUEUE until their verdict.
    Nfqueue,
}

impl StageKind {
    /// Every stage, in the order `--stage` lists them.
    pub const ALL: [StageKind; 2] = [StageKind::Bridge, StageKind::Nfqueue];

    /// The name `--stage` takes and reports show.
    pub fn name(self) -> &'static str {
        match self {
            StageKind::Bridge => "bridge",
            StageKind::Nfqueue => "nfqueue",
        }
    }
}

impl std::fmt::Display for StageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A netsim stage name that is not `bridge` or `nfqueue`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown netsim stage `{0}` (bridge or nfqueue)")]
pub struct UnknownStage(pub String);

impl std::str::FromStr for StageKind {
    type Err = UnknownStage;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StageKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownStage(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::StageKind;

    #[test]
    fn names_round_trip() {
        for k in StageKind::ALL {
            assert_eq!(k.name().parse::<StageKind>(), Ok(k));
        }
        let e = "tun".parse::<StageKind>().unwrap_err();
        assert_eq!(e, super::UnknownStage("tun".into()));
        assert!(e.to_string().contains("bridge or nfqueue"), "{e}");
    }
}
