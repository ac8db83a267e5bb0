//! TLS for the model's HTTP client: rustls on `ring`, every server certificate checked
//! against the system's roots by `rustls-platform-verifier`, as reqwest itself would.
//!
//! The one difference from reqwest's own set-up is when the roots are read: reqwest builds
//! the platform verifier with the client, which reads and parses the system's root
//! certificates (~6 ms of CPU) even when every model is a local `http://` server. Here
//! the client gets a [`LazyVerifier`] that builds the platform verifier at the first
//! certificate it has to check and keeps it, so a `familiar run` against Ollama or
//! llama.cpp never reads them, and a daemon reads them once, at its first `https://`
//! handshake. Invariant: no certificate is accepted without that verifier's verdict.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_platform_verifier::Verifier;

/// Makes `ring` the process's rustls crypto provider (reqwest is built without one, see
/// Cargo.toml). Every HTTP client is built after this: ours in [`client_config`], and
/// the ones libraries build for themselves (MCP's streamable HTTP), because `main`
/// calls it first. Installing twice is harmless: the first provider stays.
pub fn install_tls_provider() {
    // Err only when a provider is already installed, which is the state we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The process's crypto provider (`ring`, installed here if `main` has not).
fn provider() -> Arc<CryptoProvider> {
    install_tls_provider();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The rustls configuration reqwest would build for our client (TLS 1.2 and 1.3, SNI,
/// ALPN `h2` then `http/1.1`, no client certificate), with the platform verifier made
/// lazily.
pub(super) fn client_config() -> Result<rustls::ClientConfig, rustls::Error> {
    config_with(Arc::new(LazyVerifier::new(provider(), Verifier::new)))
}

fn config_with(verifier: Arc<LazyVerifier>) -> Result<rustls::ClientConfig, rustls::Error> {
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::clone(&verifier.provider))
        .with_protocol_versions(rustls::ALL_VERSIONS)?
        // "Dangerous" is rustls' name for any verifier of one's own; this one hands
        // every decision to the platform verifier reqwest uses by default.
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// How the platform verifier is made: [`Verifier::new`], or in tests one that also
/// trusts a test CA.
type Load = fn(Arc<CryptoProvider>) -> Result<Verifier, rustls::Error>;

/// The platform verifier, made at the first certificate to check.
#[derive(Debug)]
struct LazyVerifier {
    provider: Arc<CryptoProvider>,
    load: Load,
    verifier: OnceLock<Verifier>,
}

impl LazyVerifier {
    fn new(provider: Arc<CryptoProvider>, load: Load) -> Self {
        LazyVerifier {
            provider,
            load,
            verifier: OnceLock::new(),
        }
    }

    /// The platform verifier, made now if this is the first use. A failure (no root
    /// certificates on the system) is not kept: the next handshake tries again.
    fn verifier(&self) -> Result<&Verifier, rustls::Error> {
        if let Some(v) = self.verifier.get() {
            return Ok(v);
        }
        let made = (self.load)(Arc::clone(&self.provider))?;
        // Two handshakes racing here both read the roots; the first one stored is kept.
        Ok(self.verifier.get_or_init(|| made))
    }
}

impl ServerCertVerifier for LazyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verifier()?.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier()?.verify_tls13_signature(message, cert, dss)
    }

    /// Asked for every ClientHello, before any certificate arrives: the provider's
    /// schemes, which are what the platform verifier (WebPKI over the same provider)
    /// answers, without reading the roots.
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
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
}
