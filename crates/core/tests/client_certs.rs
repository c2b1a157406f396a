//! Mutual TLS over real sockets: a hub that requires agent certificates from its CA on QUIC,
//! HTTP/2 and WebSocket over TLS. An agent with its own certificate works; one without a
//! certificate, with a certificate from another CA, or with another agent's certificate is
//! refused, while the certified agents keep working. Unix-socket agents need none.

mod common;

use std::sync::Arc;
use std::time::Duration;

use agentwire::hub::{token_sha256, AccessPolicy, Hub, HubConfig};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, AgentIdentity, CertBundle, ClientCa, HubIdentity};
use agentwire::{Agent, AgentError, AgentOptions, ErrorCode, HubTrust, Kind};

fn agent_identity(bundle: &CertBundle, id: &str) -> AgentIdentity {
    let cert = tls::issue_agent_cert(&bundle.ca_cert_pem, &bundle.ca_key_pem, id, 30).unwrap();
    AgentIdentity::from_pem(&cert.cert_pem, &cert.key_pem).unwrap()
}

struct Setup {
    hub: Hub,
    bundle: CertBundle,
    urls: Vec<String>,
    unix: String,
    _listeners: Vec<agentwire::hub::Listener>,
    _dir: tempfile::TempDir,
}

async fn hub_requiring_certs(access: Option<AccessPolicy>) -> Setup {
    common::init_logs();
    let bundle = tls::generate(&tls::default_hub_names()).unwrap();
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let config = HubConfig {
        client_ca: Some(ClientCa::from_pem(&bundle.ca_cert_pem).unwrap()),
        access: access.map(Arc::new),
        ..HubConfig::default()
    };
    let hub = Hub::new(config, HubMetrics::new());
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("hub.sock");
    let listeners = common::listen_everywhere(&hub, &identity, &sock).await;
    let urls: Vec<String> = listeners.iter().map(|l| l.url.to_string()).collect();
    let unix = urls
        .iter()
        .find(|u| u.starts_with("unix://"))
        .cloned()
        .unwrap();
    let urls = urls
        .into_iter()
        .filter(|u| !u.starts_with("unix://"))
        .collect();
    Setup {
        hub,
        bundle,
        urls,
        unix,
        _listeners: listeners,
        _dir: dir,
    }
}

impl Setup {
    fn opts(&self, url: &str, id: &str, identity: Option<AgentIdentity>) -> AgentOptions {
        let trust = HubTrust::ca_pem(&self.bundle.ca_cert_pem).unwrap();
        let mut opts = AgentOptions::new(id, url, trust);
        opts.identity = identity;
        opts.connect_timeout = Duration::from_secs(10);
        opts
    }

    async fn certified(&self, url: &str, id: &str) -> Agent {
        let identity = agent_identity(&self.bundle, id);
        Agent::connect(self.opts(url, id, Some(identity)))
            .await
            .unwrap_or_else(|e| panic!("{url}: {id} with its own certificate: {e}"))
    }
}

/// Answers every request with its body until the connection ends.
fn echo(mut agent: Agent) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(msg) = agent.recv().await {
            if msg.envelope.kind == Kind::Request {
                let _ = msg.reply(msg.envelope.body.clone()).await;
            }
        }
    })
}

async fn ask(agent: &Agent, to: &str) -> Result<Vec<u8>, AgentError> {
    let reply = agent.request(to, "ping", Duration::from_secs(10)).await?;
    Ok(reply.body.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_agents_with_their_own_certificate_get_in() {
    let setup = hub_requiring_certs(None).await;
    let echo_task = echo(setup.certified(&setup.urls[0], "worker-1").await);
    let stranger_ca = tls::generate(&tls::default_hub_names()).unwrap();

    for url in &setup.urls {
        let boss = setup.certified(url, "boss").await;
        assert_eq!(ask(&boss, "worker-1").await.unwrap(), b"ping", "{url}");

        // No certificate: the TLS handshake fails, and the error says a certificate is needed.
        let err = Agent::connect(setup.opts(url, "anon", None))
            .await
            .err()
            .unwrap_or_else(|| panic!("{url}: an agent without a certificate got in"));
        assert!(
            matches!(err, AgentError::Connect(_) | AgentError::Disconnected(_)),
            "{url}: {err}"
        );
        let text = err.to_string().to_lowercase();
        assert!(text.contains("certificate"), "{url}: {err}");

        // A certificate from another CA.
        let foreign = agent_identity(&stranger_ca, "worker-9");
        let err = Agent::connect(setup.opts(url, "worker-9", Some(foreign)))
            .await
            .err()
            .unwrap_or_else(|| panic!("{url}: a certificate from another CA was accepted"));
        assert!(!matches!(err, AgentError::Rejected { .. }), "{url}: {err}");

        // Another agent's certificate: the TLS handshake succeeds, the hello is refused.
        let stolen = agent_identity(&setup.bundle, "worker-1");
        match Agent::connect(setup.opts(url, "worker-2", Some(stolen))).await {
            Err(AgentError::Rejected { code, reason }) => {
                assert_eq!(code, ErrorCode::Unauthorized, "{url}");
                assert!(reason.contains("names \"worker-1\""), "{url}: {reason}");
            }
            Err(other) => panic!("{url}: {other}"),
            Ok(_) => panic!("{url}: worker-2 got in with worker-1's certificate"),
        }

        // Everyone certified keeps working.
        assert_eq!(ask(&boss, "worker-1").await.unwrap(), b"ping", "{url}");
        boss.close().await;
    }

    // A Unix-socket agent needs no certificate (the socket file's mode guards it).
    let local = Agent::connect(setup.opts(&setup.unix, "local", None))
        .await
        .unwrap();
    assert_eq!(ask(&local, "worker-1").await.unwrap(), b"ping");
    let metrics = setup.hub.metrics().encode();
    let refusals = metrics
        .lines()
        .find(|l| l.starts_with("agentwire_hub_errors_total{code=\"unauthorized\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok());
    assert_eq!(refusals, Some(3), "{metrics}");
    echo_task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_access_file_grants_certified_ids_their_permissions() {
    let policy = AccessPolicy::from_json(&format!(
        r#"{{"credentials": [
            {{"client_cert": true, "ids": ["worker-*"], "send": ["topic:results"]}},
            {{"client_cert": true, "ids": ["boss"], "send": ["agent:worker-*"]}},
            {{"token_sha256": "{}", "ids": ["local"], "send": ["*"]}}]}}"#,
        token_sha256("local-token")
    ))
    .unwrap();
    let setup = hub_requiring_certs(Some(policy)).await;
    let quic = setup.urls[0].clone();
    let echo_task = echo(setup.certified(&quic, "worker-1").await);
    let boss = setup.certified(&quic, "boss").await;
    assert_eq!(ask(&boss, "worker-1").await.unwrap(), b"ping");

    // A certified worker may not send where its credential does not allow.
    let worker = setup.certified(&quic, "worker-2").await;
    match ask(&worker, "boss").await {
        Err(AgentError::Remote { code, .. }) => assert_eq!(code, ErrorCode::Unauthorized),
        other => panic!("worker-2 asked the boss: {other:?}"),
    }
    // An id no credential names is refused even with a valid certificate.
    let err = Agent::connect(setup.opts(
        &quic,
        "intruder",
        Some(agent_identity(&setup.bundle, "intruder")),
    ))
    .await
    .err()
    .unwrap();
    assert!(
        matches!(
            err,
            AgentError::Rejected {
                code: ErrorCode::Unauthorized,
                ..
            }
        ),
        "{err}"
    );
    // The Unix-socket agent uses its token credential.
    let mut local = setup.opts(&setup.unix, "local", None);
    local.auth_token = Some("local-token".into());
    let local = Agent::connect(local).await.unwrap();
    assert_eq!(ask(&local, "worker-1").await.unwrap(), b"ping");
    assert_eq!(ask(&boss, "worker-1").await.unwrap(), b"ping");
    echo_task.abort();
}

/// A hub whose client CA and revocations come from files, as `agentwire hub --client-ca
/// --revoked-serials` loads them, with its listeners and the files.
struct Reloadable {
    hub: Hub,
    bundle: CertBundle,
    identity: HubIdentity,
    urls: Vec<String>,
    ca_file: std::path::PathBuf,
    revoked_file: std::path::PathBuf,
    _listeners: Vec<agentwire::hub::Listener>,
    _dir: tempfile::TempDir,
}

async fn hub_from_files() -> Reloadable {
    common::init_logs();
    let bundle = tls::generate(&tls::default_hub_names()).unwrap();
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    let revoked_file = dir.path().join("revoked.txt");
    std::fs::write(&ca_file, &bundle.ca_cert_pem).unwrap();
    std::fs::write(&revoked_file, "# none yet\n").unwrap();
    let ca = ClientCa::from_file(&ca_file).unwrap();
    ca.set_revoked(tls::RevokedSerials::from_file(&revoked_file).unwrap());
    let config = HubConfig {
        client_ca: Some(ca),
        ..HubConfig::default()
    };
    let hub = Hub::new(config, HubMetrics::new());
    let listeners = common::listen_everywhere(&hub, &identity, &dir.path().join("hub.sock")).await;
    let urls = listeners
        .iter()
        .map(|l| l.url.to_string())
        .filter(|u| !u.starts_with("unix://"))
        .collect();
    Reloadable {
        hub,
        bundle,
        identity,
        urls,
        ca_file,
        revoked_file,
        _listeners: listeners,
        _dir: dir,
    }
}

impl Reloadable {
    fn opts(&self, url: &str, id: &str, identity: AgentIdentity, trust: HubTrust) -> AgentOptions {
        let mut opts = AgentOptions::new(id, url, trust);
        opts.identity = Some(identity);
        opts.connect_timeout = Duration::from_secs(10);
        opts
    }

    fn trust(&self) -> HubTrust {
        HubTrust::ca_pem(&self.bundle.ca_cert_pem).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_certificate_is_closed_on_reload_and_refused_after() {
    let r = hub_from_files().await;
    let mut revoked = String::new();
    let mut agents = Vec::new();
    for (i, url) in r.urls.iter().enumerate() {
        let id = format!("revoked-{i}");
        let cert =
            tls::issue_agent_cert(&r.bundle.ca_cert_pem, &r.bundle.ca_key_pem, &id, 30).unwrap();
        revoked.push_str(&format!("{}\n", cert.serial().unwrap()));
        let identity = AgentIdentity::from_pem(&cert.cert_pem, &cert.key_pem).unwrap();
        let agent = Agent::connect(r.opts(url, &id, identity.clone(), r.trust()))
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        agents.push((url.clone(), id, identity, agent));
    }
    let keeper_cert = agent_identity(&r.bundle, "kept");
    let kept = Agent::connect(r.opts(&r.urls[0], "kept", keeper_cert, r.trust()))
        .await
        .unwrap();

    std::fs::write(&r.revoked_file, &revoked).unwrap();
    let (now, closed) = r.hub.reload_certificates().unwrap().unwrap();
    assert_eq!(
        (now.cas, now.revoked, closed),
        (1, r.urls.len(), r.urls.len())
    );

    for (url, id, identity, agent) in agents {
        let why = tokio::time::timeout(Duration::from_secs(10), agent.closed())
            .await
            .unwrap_or_else(|_| panic!("{url}: {id} kept its connection after the revocation"));
        assert!(why.contains("revoked"), "{url}: {why}");
        // And it cannot come back, with a fresh TLS handshake or a resumed session.
        for _ in 0..2 {
            let again = Agent::connect(r.opts(&url, &id, identity.clone(), r.trust())).await;
            assert!(again.is_err(), "{url}: a revoked certificate got in again");
        }
    }
    // The others keep working.
    assert!(r.hub.agent("kept").is_some());
    kept.send(
        agentwire::Destination::agent("kept"),
        Kind::Event,
        "still here",
    )
    .await
    .unwrap();

    // A CA file that does not parse changes nothing.
    std::fs::write(&r.ca_file, "not a certificate").unwrap();
    assert!(r.hub.reload_certificates().unwrap().is_err());
    assert!(r.hub.agent("kept").is_some());

    // Another CA in force: the old CA's agents are closed.
    let other = tls::generate(&tls::default_hub_names()).unwrap();
    std::fs::write(&r.ca_file, &other.ca_cert_pem).unwrap();
    std::fs::write(&r.revoked_file, "").unwrap();
    let (now, closed) = r.hub.reload_certificates().unwrap().unwrap();
    assert_eq!((now.cas, now.revoked, closed), (1, 0, 1));
    let why = tokio::time::timeout(Duration::from_secs(10), kept.closed())
        .await
        .expect("the old CA's agent was not closed");
    assert!(why.contains("no longer accepted"), "{why}");
    let newcomer = tls::issue_agent_cert(&other.ca_cert_pem, &other.ca_key_pem, "new", 30).unwrap();
    let newcomer = AgentIdentity::from_pem(&newcomer.cert_pem, &newcomer.key_pem).unwrap();
    Agent::connect(r.opts(&r.urls[0], "new", newcomer, r.trust()))
        .await
        .expect("an agent of the CA now in force");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_hub_certificate_is_served_from_the_next_handshake() {
    let r = hub_from_files().await;
    let before = Agent::connect(r.opts(
        &r.urls[0],
        "before",
        agent_identity(&r.bundle, "before"),
        r.trust(),
    ))
    .await
    .unwrap();
    // A new hub key and certificate (another bundle's), put in force as SIGHUP does.
    let next = tls::generate(&tls::default_hub_names()).unwrap();
    let next_identity = HubIdentity::from_pem(&next.hub_cert_pem, &next.hub_key_pem).unwrap();
    let new_pin = HubTrust::pin(&next_identity.spki_pin().unwrap()).unwrap();
    r.identity.serve_instead(&next_identity);
    for url in &r.urls {
        let id = format!("after-{}", url.split(':').next().unwrap());
        let pinned = r.opts(url, &id, agent_identity(&r.bundle, &id), new_pin.clone());
        Agent::connect(pinned)
            .await
            .unwrap_or_else(|e| panic!("{url}: the new certificate is not served: {e}"));
        let old = r.opts(url, "old", agent_identity(&r.bundle, "old"), r.trust());
        assert!(
            Agent::connect(old).await.is_err(),
            "{url}: the old certificate is still served"
        );
    }
    // The connection made before keeps working.
    before
        .send(
            agentwire::Destination::agent("before"),
            Kind::Event,
            "still up",
        )
        .await
        .unwrap();
    assert!(r.hub.agent("before").is_some());
}
