//! The files a server offers: writing the standard benchmark files, loading a root directory
//! into memory once, and mapping request paths to those files.
//!
//! Serving from memory keeps the disk and the page cache out of the measurement and makes a
//! response a reference-counted slice ([`bytes::Bytes`]), never a copy. The price: every file
//! under the root is read at start (up to [`MAX_TOTAL_BYTES`] in all), and files changed later
//! are not seen until the server restarts.
//!
//! Path safety is enforced twice: only regular files whose real path lies inside the root
//! are loaded (a symlink to somewhere else is skipped), and request paths with `..`, `.`,
//! empty or backslash segments, NUL bytes or bad percent-escapes are refused before lookup.
//! This module must not open sockets or print.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use bytes::Bytes;

/// The standard benchmark files: name and size in bytes.
pub const STANDARD_FILES: [(&str, usize); 9] = [
    ("630b.bin", 630),
    ("1k.bin", 1024),
    ("5k.bin", 5 * 1024),
    ("10k.bin", 10 * 1024),
    ("15k.bin", 15 * 1024),
    ("100k.bin", 100 * 1024),
    ("1m.bin", 1024 * 1024),
    ("2m.bin", 2 * 1024 * 1024),
    ("10m.bin", 10 * 1024 * 1024),
];

/// Most bytes a root may hold in all (the whole root is loaded into memory).
pub const MAX_TOTAL_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// Most files a root may hold.
pub const MAX_FILES: usize = 100_000;

/// The deterministic content of a standard file of `size` bytes: a SplitMix64 stream seeded
/// with the size, so two runs (and two machines) produce the same bytes, which do not
/// compress.
///
/// ```
/// let a = agentwire_load::files::standard_content(1024);
/// assert_eq!(a.len(), 1024);
/// assert_eq!(a, agentwire_load::files::standard_content(1024));
/// assert_ne!(a[..630], agentwire_load::files::standard_content(630)[..]);
/// ```
pub fn standard_content(size: usize) -> Vec<u8> {
    let mut state = size as u64 ^ 0x6167_656e_7477_6972; // "agentwir"
    let mut out = Vec::with_capacity(size + 8);
    while out.len() < size {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(size);
    out
}

/// Writes the [`STANDARD_FILES`] into `root` (created if needed), replacing files of the same
/// names. Returns the paths written.
pub fn write_standard_files(root: &Path) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let mut written = Vec::new();
    for (name, size) in STANDARD_FILES {
        let path = root.join(name);
        let content = standard_content(size);
        // Skip a file that already holds exactly this content.
        if fs::read(&path).is_ok_and(|old| old == content) {
            written.push(path);
            continue;
        }
        fs::write(&path, &content).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// Every file under a root, in memory, keyed by its path relative to the root with `/`
/// separators (`"1k.bin"`, `"sub/a.txt"`).
#[derive(Debug, Clone, Default)]
pub struct FileStore {
    files: HashMap<String, Bytes>,
    total_bytes: u64,
}

impl FileStore {
    /// Loads every regular file under `root` (recursively). Entries whose real path leaves the
    /// root (symlinks pointing elsewhere) are skipped; unreadable entries are an error naming
    /// them.
    pub fn load(root: &Path) -> Result<Self> {
        let real_root = fs::canonicalize(root)
            .with_context(|| format!("the root directory {} is not usable", root.display()))?;
        if !real_root.is_dir() {
            bail!("the root {} is not a directory", root.display());
        }
        let mut store = FileStore::default();
        let mut pending = vec![real_root.clone()];
        while let Some(dir) = pending.pop() {
            let entries =
                fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
            for entry in entries {
                let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
                let path = entry.path();
                // Follow symlinks, then insist that the target is still inside the root.
                let real = match fs::canonicalize(&path) {
                    Ok(r) => r,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // dangling link
                    Err(e) => {
                        return Err(e).with_context(|| format!("resolving {}", path.display()))
                    }
                };
                if !real.starts_with(&real_root) {
                    continue;
                }
                let meta =
                    fs::metadata(&real).with_context(|| format!("reading {}", real.display()))?;
                if meta.is_dir() {
                    // A link to a directory inside the root would be visited twice; only
                    // descend into real directories.
                    if entry.file_type().is_ok_and(|t| t.is_dir()) {
                        pending.push(path);
                    }
                    continue;
                }
                if !meta.is_file() {
                    continue;
                }
                let Some(key) = relative_key(&real_root, &path) else {
                    continue;
                };
                if store.files.len() >= MAX_FILES {
                    bail!(
                        "{} holds more than {MAX_FILES} files; serve a smaller directory",
                        root.display()
                    );
                }
                store.total_bytes = store.total_bytes.saturating_add(meta.len());
                if store.total_bytes > MAX_TOTAL_BYTES {
                    bail!(
                        "{} holds more than {} MiB; files are served from memory, so serve a \
                         smaller directory",
                        root.display(),
                        MAX_TOTAL_BYTES / (1024 * 1024)
                    );
                }
                let data =
                    fs::read(&real).with_context(|| format!("reading {}", real.display()))?;
                store.files.insert(key, Bytes::from(data));
            }
        }
        Ok(store)
    }

    /// Builds a store from `(relative path, content)` pairs (for tests and embedding).
    pub fn from_files<I, K>(files: I) -> Self
    where
        I: IntoIterator<Item = (K, Vec<u8>)>,
        K: Into<String>,
    {
        let mut store = FileStore::default();
        for (k, v) in files {
            store.total_bytes += v.len() as u64;
            store.files.insert(k.into(), Bytes::from(v));
        }
        store
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when the store holds no file.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Bytes held in all.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// The file a request path (the URL's path, without the query) names, if it is a safe
    /// path and such a file exists.
    pub fn get(&self, request_path: &str) -> Option<&Bytes> {
        let key = normalize_request_path(request_path)?;
        self.files.get(&key)
    }
}

/// `path` relative to `root` as `a/b/c`, `None` when not below root or not UTF-8.
fn relative_key(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            std::path::Component::Normal(s) => parts.push(s.to_str()?.to_owned()),
            _ => return None,
        }
    }
    if parts.is_empty() {
        return None;
    }
    Some(parts.join("/"))
}

/// Turns a request path into a store key, or `None` when it is not acceptable: it must start
/// with `/`; it is percent-decoded (as UTF-8); then no segment may be empty, `.` or `..`, and
/// none may hold `\` or NUL. A query (`?…`) is ignored.
///
/// ```
/// use agentwire_load::files::normalize_request_path;
/// assert_eq!(normalize_request_path("/1k.bin").as_deref(), Some("1k.bin"));
/// assert_eq!(normalize_request_path("/a%20b/c?x=1").as_deref(), Some("a b/c"));
/// assert_eq!(normalize_request_path("/../etc/passwd"), None);
/// assert_eq!(normalize_request_path("/%2e%2e/etc/passwd"), None);
/// assert_eq!(normalize_request_path("relative"), None);
/// ```
pub fn normalize_request_path(path: &str) -> Option<String> {
    let path = path.split('?').next().unwrap_or_default();
    let rest = path.strip_prefix('/')?;
    let decoded = percent_decode(rest)?;
    if decoded.is_empty() {
        return None;
    }
    for segment in decoded.split('/') {
        if segment.is_empty()
            || segment == "."
            || segment == ".."
            || segment.contains('\\')
            || segment.contains('\0')
        {
            return None;
        }
    }
    Some(decoded)
}

fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_owned());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_files_have_their_sizes_and_are_rewritten_only_when_needed() {
        let dir = tempfile::tempdir().unwrap();
        let paths = write_standard_files(dir.path()).unwrap();
        assert_eq!(paths.len(), STANDARD_FILES.len());
        for (name, size) in STANDARD_FILES {
            let data = fs::read(dir.path().join(name)).unwrap();
            assert_eq!(data.len(), size, "{name}");
            assert_eq!(data, standard_content(size));
        }
        // A damaged file is repaired by a second run.
        fs::write(dir.path().join("1k.bin"), b"short").unwrap();
        write_standard_files(dir.path()).unwrap();
        assert_eq!(fs::read(dir.path().join("1k.bin")).unwrap().len(), 1024);
        let store = FileStore::load(dir.path()).unwrap();
        assert_eq!(store.len(), 9);
        assert_eq!(
            store.total_bytes(),
            STANDARD_FILES.iter().map(|f| f.1 as u64).sum::<u64>()
        );
        assert_eq!(store.get("/630b.bin").map(|b| b.len()), Some(630));
        assert_eq!(
            store.get("/10m.bin").map(|b| b.len()),
            Some(10 * 1024 * 1024)
        );
    }

    #[test]
    fn request_paths_cannot_leave_the_root() {
        for bad in [
            "",
            "/",
            "1k.bin",
            "/..",
            "/../x",
            "/a/../../x",
            "/./x",
            "/a//b",
            "/a/",
            "/%2e%2e/x",
            "/%2E%2E%2Fx",
            "/a%2f..%2f..%2fx",
            "/a\\..\\x",
            "/a%5c..",
            "/x%00",
            "/%zz",
            "/%4",
            "/%ff",
        ] {
            assert_eq!(normalize_request_path(bad), None, "{bad:?} was accepted");
        }
        assert_eq!(normalize_request_path("/a/b.c").as_deref(), Some("a/b.c"));
        assert_eq!(normalize_request_path("/%41").as_deref(), Some("A"));
    }

    #[test]
    fn loading_skips_links_out_of_the_root_and_serves_subdirectories() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.txt"), b"secret").unwrap();
        let root = tempfile::tempdir().unwrap();
        fs::create_dir(root.path().join("sub")).unwrap();
        fs::write(root.path().join("sub/inner.txt"), b"inner").unwrap();
        fs::write(root.path().join("top.txt"), b"top").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::symlink;
            symlink(
                outside.path().join("secret.txt"),
                root.path().join("leak.txt"),
            )
            .unwrap();
            symlink(outside.path(), root.path().join("leakdir")).unwrap();
            symlink(root.path().join("top.txt"), root.path().join("alias.txt")).unwrap();
            symlink(root.path().join("missing"), root.path().join("dangling")).unwrap();
        }
        let store = FileStore::load(root.path()).unwrap();
        assert_eq!(store.get("/top.txt").map(|b| &b[..]), Some(&b"top"[..]));
        assert_eq!(
            store.get("/sub/inner.txt").map(|b| &b[..]),
            Some(&b"inner"[..])
        );
        assert!(store.get("/leak.txt").is_none());
        assert!(store.get("/leakdir/secret.txt").is_none());
        assert!(store.get("/sub/../top.txt").is_none());
        assert!(store.get("/missing").is_none());
        #[cfg(unix)]
        assert_eq!(store.get("/alias.txt").map(|b| &b[..]), Some(&b"top"[..]));
        assert!(FileStore::load(&root.path().join("nope")).is_err());
        assert!(FileStore::load(&root.path().join("top.txt")).is_err());
    }
}
