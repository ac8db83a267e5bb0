//! The lazy verifier against loopback servers: a plain-HTTP request reads no roots, and
//! an `https://` one is checked (issuer, name) as the platform verifier checks it. The
//! certificates are in `tests/fixtures/tls/` (made by its `gen.py`).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;

use super::*;
use crate::llm::http::client_builder;

const CA: &str = include_str!("../../tests/fixtures/tls/ca.pem");
const CERT: &str = include_str!("../../tests/fixtures/tls/localhost.pem");
const KEY: &str = include_str!("../../tests/fixtures/tls/localhost.key");

/// The platform verifier, also trusting the test CA.
fn trusting_test_ca(provider: Arc<CryptoProvider>) -> Result<Verifier, rustls::Error> {
    let ca = CertificateDer::from_pem_slice(CA.as_bytes()).unwrap();
    Verifier::new_with_extra_roots([ca], provider)
}

static LOADS: AtomicUsize = AtomicUsize::new(0);

/// [`trusting_test_ca`], counted in [`LOADS`] (one test uses it).
fn counted(provider: Arc<CryptoProvider>) -> Result<Verifier, rustls::Error> {
    LOADS.fetch_add(1, Ordering::SeqCst);
    trusting_test_ca(provider)
}

fn not_called(_: Arc<CryptoProvider>) -> Result<Verifier, rustls::Error> {
    panic!("a plain-HTTP request must not read the root certificates")
}

/// Answers `connections` requests with `200 ok`, over TLS with the `localhost`
/// certificate when `tls`.
fn serve(tls: bool, connections: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let config = tls.then(|| {
        let cert = CertificateDer::from_pem_slice(CERT.as_bytes()).unwrap();
        let key = PrivateKeyDer::from_pem_slice(KEY.as_bytes()).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    });
    thread::spawn(move || {
        for stream in listener.incoming().take(connections) {
            let stream = stream.unwrap();
            match &config {
                Some(config) => {
                    let conn = rustls::ServerConnection::new(Arc::clone(config)).unwrap();
                    answer(rustls::StreamOwned::new(conn, stream));
                }
                None => answer(stream),
            }
        }
    });
    addr
}

/// Reads one request's head and answers it; a client that gave up in the handshake
/// ends the read.
fn answer<S: std::io::Read + Write>(stream: S) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => {}
        }
    }
    let stream = reader.get_mut();
    let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
    if stream
        .write_all(reply)
        .and_then(|()| stream.flush())
        .is_err()
    {
        // The client is gone; nothing to answer.
    }
}

fn client(verifier: &Arc<LazyVerifier>, addr: SocketAddr) -> reqwest::Client {
    client_builder(config_with(Arc::clone(verifier)).unwrap())
        .resolve("localhost", addr)
        .build()
        .unwrap()
}

/// The whole chain of an error, for asserting on the TLS cause under reqwest's.
fn chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[tokio::test]
async fn plain_http_reads_no_root_certificates() {
    let addr = serve(false, 1);
    let verifier = Arc::new(LazyVerifier::new(provider(), not_called));
    let body = client(&verifier, addr)
        .get(format!("http://localhost:{}/", addr.port()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "ok");
    assert!(verifier.verifier.get().is_none());
}

#[tokio::test]
async fn https_from_a_trusted_issuer_connects_and_reads_the_roots_once() {
    let addr = serve(true, 2);
    let verifier = Arc::new(LazyVerifier::new(provider(), counted));
    let client = client(&verifier, addr);
    for _ in 0..2 {
        let response = client
            .get(format!("https://localhost:{}/", addr.port()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.text().await.unwrap(), "ok");
    }
    // Two connections (the server closes each), two handshakes, one load.
    assert_eq!(LOADS.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn https_for_another_name_is_refused() {
    let addr = serve(true, 1);
    let verifier = Arc::new(LazyVerifier::new(provider(), trusting_test_ca));
    // The certificate names `localhost` only.
    let err = client(&verifier, addr)
        .get(format!("https://127.0.0.1:{}/", addr.port()))
        .send()
        .await
        .unwrap_err();
    assert!(
        chain(&err).contains("not valid for name"),
        "{}",
        chain(&err)
    );
}

/// `new_client` itself: the test CA is in no system store, so its certificate is refused.
#[tokio::test]
async fn https_from_an_issuer_outside_the_system_roots_is_refused() {
    let addr = serve(true, 1);
    let client = crate::llm::new_client().unwrap();
    let err = client
        .get(format!("https://localhost:{}/", addr.port()))
        .send()
        .await
        .unwrap_err();
    let text = chain(&err);
    // "invalid peer certificate: UnknownIssuer", or on a machine without a CA bundle
    // the platform verifier's "No CA certificates were loaded from the system".
    assert!(
        text.contains("UnknownIssuer") || text.contains("No CA certificates"),
        "{text}"
    );
}

#[test]
fn the_offered_schemes_are_the_platform_verifiers() {
    let lazy = LazyVerifier::new(provider(), trusting_test_ca);
    let platform = trusting_test_ca(provider()).unwrap();
    assert_eq!(
        lazy.supported_verify_schemes(),
        platform.supported_verify_schemes()
    );
    assert!(lazy.verifier.get().is_none());
}
