//! The cert directory: the four files `agentwire cert` writes (`ca.pem`, `ca.key`, `hub.pem`,
//! `hub.key`), written with safe permissions and never overwritten unless asked.
//!
//! This module owns the file names and the writing; it must not generate or parse keys.

use super::*;

/// Paths of the four files in a cert directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    /// CA certificate (`ca.pem`).
    pub ca_cert: PathBuf,
    /// CA private key (`ca.key`).
    pub ca_key: PathBuf,
    /// Hub certificate (`hub.pem`).
    pub hub_cert: PathBuf,
    /// Hub private key (`hub.key`).
    pub hub_key: PathBuf,
}

impl CertFiles {
    /// The standard file names (`ca.pem`, `ca.key`, `hub.pem`, `hub.key`) inside `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        CertFiles {
            ca_cert: dir.join(CA_CERT_FILE),
            ca_key: dir.join(CA_KEY_FILE),
            hub_cert: dir.join(HUB_CERT_FILE),
            hub_key: dir.join(HUB_KEY_FILE),
        }
    }
}

/// Writes `contents` to `path`; `private` files get mode 0600 (on Unix).
/// Without `overwrite` the file must not exist (checked atomically).
pub(crate) fn write_file(
    path: &Path,
    contents: &str,
    private: bool,
    overwrite: bool,
) -> Result<(), TlsError> {
    let mut opts = fs::OpenOptions::new();
    opts.write(true);
    if overwrite {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if private { 0o600 } else { 0o644 });
    }
    let mut file = opts.open(path).map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            TlsError::AlreadyExists(path.to_path_buf())
        } else {
            io_err(path, e)
        }
    })?;
    // The mode above only applies to newly created files; an overwritten key
    // file may have had looser permissions.
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|e| io_err(path, e))?;
    }
    #[cfg(not(unix))]
    let _ = private;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| io_err(path, e))
}

/// The first of `paths` that exists, as [`TlsError::AlreadyExists`] (or why it could not be
/// looked at); `Ok` when none does.
pub(crate) fn refuse_existing<'a>(
    paths: impl IntoIterator<Item = &'a Path>,
) -> Result<(), TlsError> {
    for path in paths {
        match fs::symlink_metadata(path) {
            Ok(_) => return Err(TlsError::AlreadyExists(path.to_path_buf())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(path, e)),
        }
    }
    Ok(())
}

/// Writes `bundle` into `dir` as `ca.pem`, `ca.key`, `hub.pem`, `hub.key`.
///
/// Creates `dir` (and parents) if needed. Private keys are written with mode
/// 0600 on Unix. Unless `overwrite` is true, nothing is written if any of the
/// four files already exists ([`TlsError::AlreadyExists`]).
pub fn write_cert_dir(
    dir: &Path,
    bundle: &CertBundle,
    overwrite: bool,
) -> Result<CertFiles, TlsError> {
    fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let files = CertFiles::in_dir(dir);
    let plan = [
        (&files.ca_cert, &bundle.ca_cert_pem, false),
        (&files.ca_key, &bundle.ca_key_pem, true),
        (&files.hub_cert, &bundle.hub_cert_pem, false),
        (&files.hub_key, &bundle.hub_key_pem, true),
    ];
    if !overwrite {
        refuse_existing(plan.iter().map(|(path, _, _)| path.as_path()))?;
    }
    for (path, contents, private) in plan {
        write_file(path, contents, private, overwrite)?;
    }
    Ok(files)
}
