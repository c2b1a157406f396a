//! Shared by the load tests: a temporary directory holding `certs/` (a freshly generated CA and
//! hub certificate, from `agentwire_tls`) and an empty `www/` for `serve --generate`.

/// A new temporary directory with `certs/` and `www/`; removed when dropped.
pub fn test_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let bundle = agentwire_tls::generate(&agentwire_tls::default_hub_names()).unwrap();
    agentwire_tls::write_cert_dir(&dir.path().join("certs"), &bundle, false).unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    dir
}
