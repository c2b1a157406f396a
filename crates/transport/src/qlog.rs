//! One qlog file per QUIC connection (`--qlog DIR`).
//!
//! quinn (feature `qlog`) records every packet sent, received and declared lost, and its
//! recovery metrics (congestion window, bytes in flight, RTTs, pacing rate), as a qlog trace.
//! This module owns where that trace goes: a file `DIR/<role>-<name>.sqlog` in the JSON-SEQ
//! form qvis opens, and the [`quinn::TransportConfig`] that writes it. Events are buffered and
//! written out at least every [`FLUSH_INTERVAL`] while the connection is active; the file is
//! complete once quinn drops the connection.
//!
//! It must not decide which connections are traced (the hub and agent do, from
//! [`QuicSettings::qlog_dir`]) and must not read the events.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quinn::TransportConfig;

use crate::settings::QuicSettings;
use crate::{ConnectError, TransportError};

/// Which side of a connection a trace was written by (the file name's first part).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QlogRole {
    /// The hub's end (`hub-<original destination connection ID>.sqlog`).
    Hub,
    /// An agent's end (`agent-<agent id>-<pid>-<n>.sqlog`).
    Agent,
}

impl QlogRole {
    fn as_str(self) -> &'static str {
        match self {
            QlogRole::Hub => "hub",
            QlogRole::Agent => "agent",
        }
    }
}

/// Longest time an event written to a trace may stay in memory while events keep coming.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(200);

/// A buffered file that flushes when [`FLUSH_INTERVAL`] has passed since its last flush (a
/// write per event would cost a system call per packet) and when dropped.
struct TraceFile {
    file: BufWriter<File>,
    flushed: Instant,
}

impl Write for TraceFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        if self.flushed.elapsed() >= FLUSH_INTERVAL {
            self.flush()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flushed = Instant::now();
        self.file.flush()
    }
}

/// Connections traced by this process, for unique agent file names.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// The file a trace of `role`'s connection called `name` goes to.
///
/// ```
/// use agentwire_transport::qlog::{qlog_path, QlogRole};
/// let p = qlog_path("traces".as_ref(), QlogRole::Agent, "boss/1");
/// assert_eq!(p, std::path::Path::new("traces/agent-boss_1.sqlog"));
/// ```
pub fn qlog_path(dir: &Path, role: QlogRole, name: &str) -> PathBuf {
    dir.join(format!("{}-{}.sqlog", role.as_str(), file_safe(name)))
}

/// `name` with every character other than ASCII letters, digits, `-`, `_` and `.` replaced by
/// `_`, for use as a file or directory name.
///
/// ```
/// assert_eq!(agentwire_transport::qlog::file_safe("50ms+1%/a b"), "50ms_1__a_b");
/// ```
pub fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A name unique in this process for an agent's connection: `<agent>-<pid>-<n>`.
pub(crate) fn agent_trace_name(agent: &str) -> String {
    let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("{agent}-{}-{n}", std::process::id())
}

/// `settings`' transport configuration, writing a qlog trace to `DIR/<role>-<name>.sqlog`
/// when `settings.qlog_dir` is set (`None` when it is not: use the shared configuration).
pub(crate) fn traced_transport(
    settings: &QuicSettings,
    role: QlogRole,
    name: &str,
) -> Result<Option<TransportConfig>, TransportError> {
    let Some(dir) = &settings.qlog_dir else {
        return Ok(None);
    };
    let mut transport = settings
        .transport_config()
        .map_err(ConnectError::settings)?;
    let trace = |what: String, e: std::io::Error| ConnectError::Trace {
        what,
        source: std::sync::Arc::new(e),
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| trace(format!("cannot create qlog directory {}", dir.display()), e))?;
    let path = qlog_path(dir, role, name);
    let file =
        File::create(&path).map_err(|e| trace(format!("cannot create {}", path.display()), e))?;
    let mut config = quinn::QlogConfig::default();
    config
        .writer(Box::new(TraceFile {
            file: BufWriter::with_capacity(64 * 1024, file),
            flushed: Instant::now(),
        }))
        .title(Some(format!("agentwire {} {name}", role.as_str())))
        .description(Some(format!("congestion control {}", settings.congestion)))
        .start_time(Instant::now());
    let stream = config.into_stream().ok_or_else(|| {
        ConnectError::Config(format!("cannot start the qlog trace {}", path.display()))
    })?;
    transport.qlog_stream(Some(stream));
    Ok(Some(transport))
}
