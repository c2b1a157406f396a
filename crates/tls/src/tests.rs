//! The TLS crate's tests: generation, loading, pins, trust, configurations and the wording of
//! failures, over real rustls handshakes (and one QUIC handshake with 0-RTT).

use super::*;
use rustls::{ClientConnection, Connection, ServerConnection};

fn identity(bundle: &CertBundle) -> HubIdentity {
    HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap()
}

fn local_bundle() -> CertBundle {
    generate(&default_hub_names()).unwrap()
}

/// Moves all pending TLS bytes from `from` to `to`.
fn pump(from: &mut Connection, to: &mut Connection) -> Result<usize, rustls::Error> {
    let mut buf = Vec::new();
    while from.wants_write() {
        from.write_tls(&mut buf).unwrap();
    }
    let mut rd = &buf[..];
    while !rd.is_empty() {
        to.read_tls(&mut rd).unwrap();
        to.process_new_packets()?;
    }
    Ok(buf.len())
}

struct Outcome {
    client_err: Option<rustls::Error>,
    server_err: Option<rustls::Error>,
    alpn: Option<Vec<u8>>,
    suite: Option<rustls::CipherSuite>,
    /// The end-entity certificate the server presented.
    peer_cert: Option<Vec<u8>>,
}

impl Outcome {
    fn ok(&self) -> bool {
        self.client_err.is_none() && self.server_err.is_none()
    }
    fn client_err(&self) -> &rustls::Error {
        self.client_err.as_ref().expect("client should have failed")
    }
}

/// In-memory handshake between a client and a server config.
fn handshake(client: rustls::ClientConfig, server: rustls::ServerConfig, name: &str) -> Outcome {
    let name = ServerName::try_from(name.to_string()).unwrap();
    let mut c = Connection::Client(ClientConnection::new(Arc::new(client), name).unwrap());
    let mut s = Connection::Server(ServerConnection::new(Arc::new(server)).unwrap());
    let mut out = Outcome {
        client_err: None,
        server_err: None,
        alpn: None,
        suite: None,
        peer_cert: None,
    };
    for _ in 0..20 {
        let a = match pump(&mut c, &mut s) {
            Ok(n) => n,
            Err(e) => {
                out.server_err = Some(e);
                let _ = pump(&mut s, &mut c).map_err(|e| out.client_err = Some(e));
                return out;
            }
        };
        let b = match pump(&mut s, &mut c) {
            Ok(n) => n,
            Err(e) => {
                out.client_err = Some(e);
                let _ = pump(&mut c, &mut s).map_err(|e| out.server_err = Some(e));
                return out;
            }
        };
        if a == 0 && b == 0 && !c.is_handshaking() && !s.is_handshaking() {
            out.alpn = c.alpn_protocol().map(|p| p.to_vec());
            out.suite = c.negotiated_cipher_suite().map(|s| s.suite());
            out.peer_cert = c
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|der| der.to_vec());
            assert_eq!(s.alpn_protocol(), c.alpn_protocol());
            return out;
        }
    }
    panic!("handshake did not finish");
}

fn server_for(bundle: &CertBundle) -> rustls::ServerConfig {
    server_config(&identity(bundle), &[ALPN_AGENTWIRE]).unwrap()
}

fn client_for(trust: &HubTrust) -> rustls::ClientConfig {
    client_config(trust, &[ALPN_AGENTWIRE]).unwrap()
}

#[test]
fn ca_trusted_handshake_succeeds_for_every_default_name() {
    let bundle = local_bundle();
    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
    for name in default_hub_names() {
        let out = handshake(client_for(&trust), server_for(&bundle), &name);
        assert!(
            out.ok(),
            "{name}: {:?} / {:?}",
            out.client_err,
            out.server_err
        );
        assert_eq!(out.alpn.as_deref(), Some(ALPN_AGENTWIRE));
        assert_eq!(
            out.suite,
            Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256),
            "the hardware-hashed suite is preferred"
        );
    }
}

#[test]
fn wrong_ca_is_rejected_with_unknown_issuer() {
    let hub = local_bundle();
    let other = local_bundle();
    let trust = HubTrust::ca_pem(&other.ca_cert_pem).unwrap();
    let out = handshake(client_for(&trust), server_for(&hub), "localhost");
    let err = out.client_err();
    assert!(
        matches!(
            err,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
        ),
        "{err:?}"
    );
    let msg = describe_tls_error(err);
    assert!(msg.contains("not signed by the trusted CA"), "{msg}");
    // The hub sees the client's alert.
    let server_msg = describe_tls_error(out.server_err.as_ref().unwrap());
    assert!(
        server_msg.contains("rejected our certificate"),
        "{server_msg}"
    );
}

#[test]
fn hub_name_not_in_sans_fails_clearly() {
    let bundle = generate(&["hub.example".to_string(), "10.1.2.3".to_string()]).unwrap();
    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
    let ok = handshake(client_for(&trust), server_for(&bundle), "10.1.2.3");
    assert!(ok.ok(), "{:?}", ok.client_err);
    let out = handshake(client_for(&trust), server_for(&bundle), "localhost");
    let err = out.client_err();
    assert!(
        matches!(
            err,
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            )
        ),
        "{err:?}"
    );
    let msg = describe_tls_error(err);
    assert!(
        msg.contains("not valid for the name \"localhost\""),
        "{msg}"
    );
    assert!(msg.contains("hub.example"), "{msg}");
    assert!(msg.contains("10.1.2.3"), "{msg}");
}

#[test]
fn correct_pin_succeeds_regardless_of_name_and_issuer() {
    let bundle = generate(&["hub.example".to_string()]).unwrap();
    let pin = identity(&bundle).spki_pin().unwrap();
    let trust = HubTrust::pin(&pin).unwrap();
    let out = handshake(client_for(&trust), server_for(&bundle), "anything.invalid");
    assert!(out.ok(), "{:?} / {:?}", out.client_err, out.server_err);
    assert_eq!(out.alpn.as_deref(), Some(ALPN_AGENTWIRE));
}

#[test]
fn wrong_pin_is_rejected_with_pin_message() {
    let hub = local_bundle();
    let other = local_bundle();
    let want = identity(&other).spki_pin().unwrap();
    let got = identity(&hub).spki_pin().unwrap();
    assert_ne!(want, got);
    let trust = HubTrust::pin(&want).unwrap();
    let out = handshake(client_for(&trust), server_for(&hub), "localhost");
    let err = out.client_err();
    let msg = describe_tls_error(err);
    assert_eq!(
        msg,
        format!("the hub's public key {got} does not match the pinned {want}")
    );
}

#[test]
fn insecure_accepts_anything() {
    // A self-signed cert for an unrelated name, not from our CA.
    let rogue = rcgen::generate_simple_self_signed(vec!["evil.example".to_string()]).unwrap();
    let ident =
        HubIdentity::from_pem(&rogue.cert.pem(), &rogue.signing_key.serialize_pem()).unwrap();
    let server = server_config(&ident, &[ALPN_AGENTWIRE]).unwrap();
    let out = handshake(client_for(&HubTrust::Insecure), server, "localhost");
    assert!(out.ok(), "{:?} / {:?}", out.client_err, out.server_err);
}

#[test]
fn alpn_mismatch_is_described() {
    let bundle = local_bundle();
    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
    let client = client_config(&trust, &[b"something-else"]).unwrap();
    let out = handshake(client, server_for(&bundle), "localhost");
    let err = out.server_err.as_ref().unwrap();
    assert!(describe_tls_error(err).contains("ALPN"), "{err:?}");
}

#[test]
fn spki_pin_is_hash_of_subject_public_key_info() {
    use rcgen::PublicKeyData;
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = rcgen::CertificateParams::new(vec!["x.example".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let expected = ring::digest::digest(&ring::digest::SHA256, &key.subject_public_key_info());
    let got = spki_sha256(cert.der().as_ref()).unwrap();
    assert_eq!(&got[..], expected.as_ref());
    assert!(spki_sha256(b"not a certificate").is_err());
    let pin = format_pin(&got);
    assert!(pin.starts_with("sha256:"));
    assert_eq!(pin.len(), 7 + 64);
}

#[test]
fn pin_parsing_accepts_and_rejects_formats() {
    let digest = [0xabu8; 32];
    let hex_lower = hex::encode(digest);
    let hex_upper = hex_lower.to_uppercase();
    for s in [
        format!("sha256:{hex_lower}"),
        format!("SHA256:{hex_upper}"),
        format!("Sha256:{hex_upper}"),
        hex_lower.clone(),
        hex_upper.clone(),
        format!("  sha256:{hex_lower}\n"),
    ] {
        match HubTrust::pin(&s) {
            Ok(HubTrust::PinnedSpki(d)) => assert_eq!(d, digest, "{s}"),
            other => panic!("{s:?} -> {other:?}"),
        }
    }
    assert_eq!(
        format_pin(&digest),
        format!("sha256:{hex_lower}"),
        "format_pin round trip"
    );
    for bad in [
        String::new(),
        "sha256:".to_string(),
        format!("sha256:{}", &hex_lower[..62]),
        format!("sha256:{hex_lower}00"),
        format!("sha1:{hex_lower}"),
        format!("sha256//{hex_lower}"),
        format!("sha256:{}zz", &hex_lower[..62]),
        "sha256:é".to_string(),
    ] {
        let err = HubTrust::pin(&bad).unwrap_err();
        assert!(matches!(err, TlsError::InvalidPin(_)), "{bad:?} -> {err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("64 hex digits") || msg.contains("sha256"),
            "{msg}"
        );
    }
}

#[test]
fn write_cert_dir_sets_key_modes_and_refuses_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nested").join("certs");
    let bundle = local_bundle();
    let files = write_cert_dir(&dir, &bundle, false).unwrap();
    assert_eq!(files, CertFiles::in_dir(&dir));
    assert_eq!(
        fs::read_to_string(&files.ca_cert).unwrap(),
        bundle.ca_cert_pem
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&files.ca_key), 0o600);
        assert_eq!(mode(&files.hub_key), 0o600);
        // An overwritten key with loose permissions is tightened again.
        fs::set_permissions(&files.hub_key, fs::Permissions::from_mode(0o644)).unwrap();
        let second = local_bundle();
        write_cert_dir(&dir, &second, true).unwrap();
        assert_eq!(mode(&files.hub_key), 0o600);
        assert_eq!(
            fs::read_to_string(&files.hub_key).unwrap(),
            second.hub_key_pem
        );
    }
    let before = fs::read_to_string(&files.hub_key).unwrap();
    let err = write_cert_dir(&dir, &local_bundle(), false).unwrap_err();
    match &err {
        TlsError::AlreadyExists(p) => assert_eq!(p, &files.ca_cert),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("ca.pem"), "{err}");
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(fs::read_to_string(&files.hub_key).unwrap(), before);
}

#[test]
fn hub_identity_from_dir_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = local_bundle();
    write_cert_dir(tmp.path(), &bundle, false).unwrap();
    let loaded = HubIdentity::from_dir(tmp.path()).unwrap();
    let direct = identity(&bundle);
    assert_eq!(loaded.cert_chain, direct.cert_chain);
    assert_eq!(loaded.key.secret_der(), direct.key.secret_der());
    assert_eq!(loaded.spki_pin().unwrap(), direct.spki_pin().unwrap());
    let cloned = loaded.clone();
    assert_eq!(cloned.key.secret_der(), loaded.key.secret_der());
    let dbg = format!("{loaded:?}");
    assert!(
        dbg.contains("<redacted>") && !dbg.contains("PRIVATE"),
        "{dbg}"
    );
    // The CA file works as trust.
    let trust = HubTrust::ca_file(&tmp.path().join(CA_CERT_FILE)).unwrap();
    let server = server_config(&loaded, &[ALPN_AGENTWIRE]).unwrap();
    assert!(handshake(client_for(&trust), server, "127.0.0.1").ok());
}

#[test]
fn loading_errors_name_the_file_and_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope.pem");
    let err = HubIdentity::load(&missing, &missing).unwrap_err();
    assert!(matches!(err, TlsError::Io { .. }));
    assert!(err.to_string().contains("nope.pem"), "{err}");

    let bundle = local_bundle();
    let other = local_bundle();
    let cert = tmp.path().join("hub.pem");
    let key = tmp.path().join("hub.key");
    fs::write(&cert, &bundle.hub_cert_pem).unwrap();
    fs::write(&key, &other.hub_key_pem).unwrap();
    let err = HubIdentity::load(&cert, &key).unwrap_err();
    assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err:?}");

    // Key file holding a certificate; cert file holding a key.
    let err = HubIdentity::load(&cert, &cert).unwrap_err();
    assert!(
        matches!(err, TlsError::NoKey(ref p) if p == &cert),
        "{err:?}"
    );
    let err = HubIdentity::load(&key, &key).unwrap_err();
    assert!(
        matches!(err, TlsError::NoCertificate(ref p) if p == &key),
        "{err:?}"
    );
    assert!(err.to_string().contains("contains no certificate"), "{err}");

    let garbage = tmp.path().join("garbage.pem");
    fs::write(&garbage, "-----BEGIN CERTIFICATE-----\n!!!!\n").unwrap();
    let err = HubTrust::ca_file(&garbage).unwrap_err();
    assert!(err.to_string().contains("garbage.pem"), "{err}");
    let err = HubTrust::ca_pem("").unwrap_err();
    assert!(matches!(err, TlsError::NoCertificate(_)), "{err:?}");
    assert!(generate(&[]).is_err());
}

#[test]
fn bundle_debug_hides_private_keys() {
    let bundle = local_bundle();
    let dbg = format!("{bundle:?}");
    assert!(!dbg.contains("PRIVATE KEY"), "{dbg}");
}

/// Real QUIC over loopback: quinn accepts both configs, ALPN is
/// negotiated, a resumed connection gets 0-RTT, and a pin mismatch
/// surfaces through quinn with a describable reason.
#[tokio::test]
async fn quinn_accepts_configs_and_does_0rtt() {
    use quinn::crypto::rustls::{HandshakeData, QuicClientConfig, QuicServerConfig};

    let bundle = local_bundle();
    let ident = identity(&bundle);
    let server_crypto = server_config(&ident, &[ALPN_AGENTWIRE]).unwrap();
    let server_cfg = quinn::ServerConfig::with_crypto(Arc::new(
        QuicServerConfig::try_from(server_crypto).unwrap(),
    ));
    let server = quinn::Endpoint::server(server_cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.local_addr().unwrap();

    let server_task = tokio::spawn(async move {
        while let Some(incoming) = server.accept().await {
            let Ok(conn) = incoming.await else { continue };
            tokio::spawn(async move {
                while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                    let data = recv.read_to_end(1024).await.unwrap();
                    send.write_all(&data).await.unwrap();
                    send.finish().unwrap();
                }
            });
        }
    });

    let client = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
    let client_crypto = client_config(&trust, &[ALPN_AGENTWIRE]).unwrap();
    let client_cfg =
        quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(client_crypto).unwrap()));

    async fn echo(conn: &quinn::Connection, msg: &[u8]) -> Vec<u8> {
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        send.write_all(msg).await.unwrap();
        send.finish().unwrap();
        recv.read_to_end(1024).await.unwrap()
    }

    let test = async {
        // 1. Full handshake.
        let conn = client
            .connect_with(client_cfg.clone(), addr, "localhost")
            .unwrap()
            .await
            .unwrap();
        let hd = conn
            .handshake_data()
            .unwrap()
            .downcast::<HandshakeData>()
            .unwrap();
        assert_eq!(hd.protocol.as_deref(), Some(ALPN_AGENTWIRE));
        assert_eq!(echo(&conn, b"hello").await, b"hello");
        conn.close(0u32.into(), b"done");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;

        // 2. Resumed connection with 0-RTT (same ClientConfig → same
        //    session store, which now holds the hub's ticket).
        let connecting = client
            .connect_with(client_cfg.clone(), addr, "localhost")
            .unwrap();
        let (conn, accepted) = connecting
            .into_0rtt()
            .unwrap_or_else(|_| panic!("no 0-RTT: session ticket not stored / early data off"));
        assert_eq!(echo(&conn, b"early").await, b"early");
        assert!(accepted.await, "hub rejected 0-RTT");
        conn.close(0u32.into(), b"done");

        // 3. A wrong pin fails, and the recording check keeps the rustls error that quinn
        //    reports only as text.
        let wrong = identity(&local_bundle()).spki_pin().unwrap();
        let recorder = Arc::new(RecordingVerifier::new(
            server_verifier(&HubTrust::pin(&wrong).unwrap()).unwrap(),
        ));
        let pinned = client_config_with_verifier(recorder.clone(), &[ALPN_AGENTWIRE]).unwrap();
        let pinned_cfg =
            quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(pinned).unwrap()));
        let err = client
            .connect_with(pinned_cfg, addr, "localhost")
            .unwrap()
            .await
            .unwrap_err();
        assert!(
            matches!(err, quinn::ConnectionError::TransportError(_)),
            "{err:?}"
        );
        let refused = recorder
            .take_refusal("localhost")
            .expect("the check recorded its refusal");
        let msg = describe_tls_error(&refused);
        assert!(msg.contains("does not match the pinned"), "{msg} ({err})");
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), test)
        .await
        .expect("quinn test timed out");
    client.wait_idle().await;
    server_task.abort();
}

/// A certificate for browsers: ECDSA P-256, under 14 days from notBefore to notAfter (the rule
/// browsers apply to `serverCertificateHashes`), signed by the directory's CA, and a hub serving
/// it completes a real handshake with a client trusting that CA.
#[test]
fn webtransport_certificates_meet_the_browsers_rules() {
    let bundle = local_bundle();
    let names = default_hub_names();
    for days in [1, WEBTRANSPORT_MAX_DAYS] {
        let wt =
            issue_webtransport_cert(&bundle.ca_cert_pem, &bundle.ca_key_pem, &names, days).unwrap();
        let (sha256, not_after) = check_webtransport_cert(&wt.cert_pem).unwrap();
        assert_eq!(sha256, wt.sha256);
        let der = CertificateDer::from_pem_slice(wt.cert_pem.as_bytes()).unwrap();
        assert_eq!(certificate_sha256(&der), sha256);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let v = cert.validity();
        let span = v.not_after.timestamp() - v.not_before.timestamp();
        assert!(span < 14 * 86_400, "{span} s");
        assert!(span >= i64::from(days) * 86_400, "{span} s for {days} days");
        let left = not_after
            .duration_since(std::time::SystemTime::now())
            .unwrap();
        assert!(left > std::time::Duration::from_secs(u64::from(days) * 86_400 - 60));
        let hub = HubIdentity::from_pem(&wt.cert_pem, &wt.key_pem).unwrap();
        let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
        let server = server_config(&hub, &[ALPN_AGENTWIRE]).unwrap();
        let out = handshake(client_for(&trust), server, "127.0.0.1");
        assert!(out.ok(), "{:?} / {:?}", out.client_err, out.server_err);
    }
    for days in [0, WEBTRANSPORT_MAX_DAYS + 1] {
        let err = issue_webtransport_cert(&bundle.ca_cert_pem, &bundle.ca_key_pem, &names, days)
            .unwrap_err();
        assert!(err.to_string().contains("1 to 13 days"), "{err}");
    }
    // The ten-year hub certificate is not one a browser takes by its hash.
    let err = check_webtransport_cert(&bundle.hub_cert_pem).unwrap_err();
    assert!(err.to_string().contains("at most 14"), "{err}");
    let err = check_webtransport_cert("not a certificate").unwrap_err();
    assert!(err.to_string().contains("not a PEM certificate"), "{err}");
}

#[test]
fn webtransport_certificates_are_written_whole_and_not_over_others() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = local_bundle();
    let issue = || {
        issue_webtransport_cert(
            &bundle.ca_cert_pem,
            &bundle.ca_key_pem,
            &["localhost".into()],
            13,
        )
        .unwrap()
    };
    let first = issue();
    let files = write_webtransport_cert(tmp.path(), &first, false).unwrap();
    assert_eq!(files, WebTransportCertFiles::in_dir(tmp.path()));
    let err = write_webtransport_cert(tmp.path(), &issue(), false).unwrap_err();
    assert!(matches!(err, TlsError::AlreadyExists(_)), "{err:?}");
    assert_eq!(fs::read_to_string(&files.cert).unwrap(), first.cert_pem);
    let second = issue();
    write_webtransport_cert(tmp.path(), &second, true).unwrap();
    assert_eq!(fs::read_to_string(&files.cert).unwrap(), second.cert_pem);
    assert_eq!(fs::read_to_string(&files.key).unwrap(), second.key_pem);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&files.key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let mut left: Vec<_> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["webtransport.key", "webtransport.pem"]);
}

/// One hub, two certificates: a client offering `h3` alone (a browser's WebTransport) gets the
/// browsers' certificate, any other client the hub's own; each replaceable while it runs.
#[test]
fn browsers_get_their_certificate_and_agents_the_hubs() {
    let bundle = local_bundle();
    let names = default_hub_names();
    let wt = issue_webtransport_cert(&bundle.ca_cert_pem, &bundle.ca_key_pem, &names, 13).unwrap();
    let hub = identity(&bundle);
    let browsers = HubIdentity::from_pem(&wt.cert_pem, &wt.key_pem).unwrap();
    let config = || {
        server_config_for_agents_and_browsers(&hub, &browsers, &[ALPN_AGENTWIRE, ALPN_H3], None)
            .unwrap()
    };
    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
    let served = |offer: &[&[u8]]| {
        let client = client_config(&trust, offer).unwrap();
        let out = handshake(client, config(), "localhost");
        assert!(out.ok(), "{:?} / {:?}", out.client_err, out.server_err);
        out.peer_cert.expect("the hub presented a certificate")
    };
    let wt_der = CertificateDer::from_pem_slice(wt.cert_pem.as_bytes()).unwrap();
    assert_eq!(served(&[ALPN_H3]), wt_der.to_vec());
    assert_eq!(served(&[ALPN_AGENTWIRE]), hub.cert_chain[0].to_vec());
    assert_eq!(
        served(&[ALPN_AGENTWIRE, ALPN_H3]),
        hub.cert_chain[0].to_vec()
    );
    // A rotated browsers' certificate is served from the next handshake on.
    let next = issue_webtransport_cert(&bundle.ca_cert_pem, &bundle.ca_key_pem, &names, 2).unwrap();
    browsers.serve_instead(&HubIdentity::from_pem(&next.cert_pem, &next.key_pem).unwrap());
    let next_der = CertificateDer::from_pem_slice(next.cert_pem.as_bytes()).unwrap();
    assert_eq!(served(&[ALPN_H3]), next_der.to_vec());
    assert_eq!(served(&[ALPN_AGENTWIRE]), hub.cert_chain[0].to_vec());
}
