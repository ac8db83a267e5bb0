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
#[path = "tls_tests.rs"]
mod tests;
