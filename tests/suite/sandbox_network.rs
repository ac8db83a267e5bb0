//! What `network` covers, held by the helper's seccomp filter on the real kernel:
//! without it no socket of any family but unix (no UDP, which Landlock does not
//! govern, no netlink, vsock or packet sockets); with it internet stream sockets, and
//! datagrams only with `udp = true`; a datagram socketpair never without a unix grant
//! (its `sendto()` reaches any path-named datagram socket outside).

use std::net::UdpSocket;
use std::os::unix::net::UnixDatagram;

use crate::common::sandbox::{SandboxHome, landlock_available, run};

/// One line per attempt: `NAME ok` or `NAME errno N`. argv[1] is a UDP port on
/// loopback, argv[2] a path-named datagram socket, both listening outside.
const FAMILIES_PY: &str = r#"
import socket, sys

def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, "errno", e.errno)

def udp_send(family, host):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.sendto(b"leak", (host, int(sys.argv[1])))

def dgram_pair_send():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"leak", sys.argv[2])

attempt("udp4", lambda: udp_send(socket.AF_INET, "127.0.0.1"))
attempt("udp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
attempt("tcp4", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK))
attempt("tcp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
attempt("vsock", lambda: socket.socket(40, socket.SOCK_STREAM))
attempt("packet", lambda: socket.socket(17, socket.SOCK_DGRAM, 0))
attempt("stream_pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
attempt("seqpacket_pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET))
attempt("dgram_pair", dgram_pair_send)
"#;

struct Outside {
    udp: UdpSocket,
    unix: UnixDatagram,
    _dir: tempfile::TempDir,
    unix_path: std::path::PathBuf,
}

impl Outside {
    fn new() -> Outside {
        let dir = tempfile::tempdir().unwrap();
        let unix_path = dir.path().join("log.sock");
        let unix = UnixDatagram::bind(&unix_path).unwrap();
        unix.set_nonblocking(true).unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        Outside {
            udp,
            unix,
            _dir: dir,
            unix_path,
        }
    }

    /// Whether anything arrived on either listener (the probe has exited: a datagram
    /// sent is already queued).
    fn received(&self) -> (bool, bool) {
        let mut buf = [0u8; 16];
        (
            self.udp.recv(&mut buf).is_ok(),
            self.unix.recv(&mut buf).is_ok(),
        )
    }
}

async fn probe(h: &SandboxHome, sandbox: &str, outside: &Outside) -> String {
    std::fs::create_dir_all(&h.workspace).unwrap();
    let script = h.ws("families.py");
    std::fs::write(&script, FAMILIES_PY).unwrap();
    let port = outside.udp.local_addr().unwrap().port().to_string();
    let out = run(
        &h.policy_with(sandbox),
        &[
            "python3",
            script.to_str().unwrap(),
            &port,
            outside.unix_path.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    out.stdout
}

/// Regression: `sendto()` over an internet datagram socket reached a listener outside
/// with `network = false`, and netlink and vsock sockets could be created.
#[tokio::test]
async fn without_network_no_socket_but_unix_pairs_can_be_made() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let outside = Outside::new();
    let lines = probe(&h, "read = [\"~\"]\nnetwork = false", &outside).await;
    assert_eq!(
        lines,
        "udp4 errno 13\nudp6 errno 13\ntcp4 errno 13\ntcp6 errno 13\nraw errno 13\n\
         netlink errno 13\nvsock errno 13\npacket errno 13\nstream_pair ok\n\
         seqpacket_pair ok\ndgram_pair errno 13\n"
    );
    assert_eq!(outside.received(), (false, false), "nothing got out");
}

#[tokio::test]
async fn network_allows_tcp_and_udp_only_when_the_soul_says_so() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let outside = Outside::new();
    let tcp_only = probe(&h, "read = [\"~\"]\nnetwork = true", &outside).await;
    assert_eq!(
        tcp_only,
        "udp4 errno 13\nudp6 errno 13\ntcp4 ok\ntcp6 ok\nraw errno 13\n\
         netlink errno 13\nvsock errno 13\npacket errno 13\nstream_pair ok\n\
         seqpacket_pair ok\ndgram_pair errno 13\n"
    );
    assert_eq!(outside.received(), (false, false));

    let with_udp = probe(&h, "read = [\"~\"]\nnetwork = true\nudp = true", &outside).await;
    assert!(
        with_udp.starts_with("udp4 ok\nudp6 ok\ntcp4 ok\ntcp6 ok\nraw errno 13\n"),
        "{with_udp}"
    );
    assert_eq!(
        outside.received(),
        (true, false),
        "the UDP datagram arrived"
    );
}

/// `udp` without `network` grants nothing: the soul's network switch comes first.
#[tokio::test]
async fn udp_without_network_is_no_network() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let outside = Outside::new();
    let lines = probe(&h, "read = [\"~\"]\nnetwork = false\nudp = true", &outside).await;
    assert!(
        lines.starts_with("udp4 errno 13\nudp6 errno 13\ntcp4 errno 13\n"),
        "{lines}"
    );
    assert_eq!(outside.received(), (false, false));
}
