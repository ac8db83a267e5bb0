//! Benchmark: what keeping a file's last version costs a `write_file` outside the
//! workspace, per megabyte, and what an undo of it costs (issue 40).
//!
//! Run: `cargo bench --bench versions` (release profile; the helper is the
//! `familiar-sandbox` built beside it). For files of 1, 8 and 32 MB in a writable tree
//! outside the workspace: the brokered write through the real helper without keeping
//! (`keep: None`), the same write with the previous content sent back (`keep`), and that
//! plus what the daemon does with it (base64 decoded, SHA-256, written to
//! `data_dir/versions` with fsync). Then `store::undo` of one changed file of each size
//! (the kept bytes written back atomically). Medians of RUNS runs (default 7) after
//! one warm-up, on the file system of `FAMILIAR_BENCH_DIR` (default a temp dir).

// A benchmark reports on stdout.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use familiar::config::versions::VersionsConfig;
use familiar::sandbox::{SandboxLauncher, SandboxPolicy, SandboxSpec};
use familiar::store::versions::{Versions, sha256_hex};
use familiar::store::{Change, Store};
use familiar_protocol::ids::{SoulId, TaskId};
use familiar_sandbox::fileops::{FileOp, FileReply};
use tokio_util::sync::CancellationToken;

const SIZES_MB: &[usize] = &[1, 8, 32];

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

struct Bench {
    launcher: SandboxLauncher,
    policy: SandboxPolicy,
    docs: PathBuf,
    store: Store,
    versions: Versions,
    trash: PathBuf,
}

impl Bench {
    fn new(root: &Path) -> Bench {
        let home = root.join("home");
        let docs = home.join("Documents");
        std::fs::create_dir_all(&docs).unwrap();
        let spec = SandboxSpec {
            read: vec![home.clone()],
            write: vec![docs.clone()],
            network: false,
            udp: false,
            require: false,
            startup: Vec::new(),
            destroy: Vec::new(),
            sockets: vec![],
            bus_talk: vec![],
        };
        let policy = SandboxPolicy::new(&spec, &[], &root.join("workspace"), &home).unwrap();
        let data = root.join("data");
        let store = Store::open(&data).unwrap();
        let versions = Versions::new(&data, VersionsConfig::default());
        Bench {
            launcher: SandboxLauncher::new(env!("CARGO_BIN_EXE_familiar-sandbox")),
            policy,
            docs,
            store,
            versions,
            trash: home.join(".local/share/Trash"),
        }
    }

    /// One brokered write of `content` over `path`; with `keep`, what the daemon does
    /// with the previous content too. Returns the time and the previous bytes.
    async fn write(&self, path: &Path, content: &str, keep: bool, store_it: bool) -> Duration {
        let op = FileOp::Write {
            path: path.to_owned(),
            content: content.to_owned(),
            keep: keep.then_some(VersionsConfig::default().max_file),
        };
        let start = Instant::now();
        let (reply, _) = self
            .launcher
            .file_op(&self.policy, &op, &CancellationToken::new())
            .await
            .unwrap();
        if store_it {
            let FileReply::Replaced { previous, .. } = &reply else {
                panic!("{reply:?}");
            };
            let bytes = previous.bytes().expect("kept bytes");
            self.versions.keep(&bytes).unwrap();
        }
        let took = start.elapsed();
        assert!(
            matches!(
                reply,
                FileReply::Written { .. } | FileReply::Replaced { .. }
            ),
            "{reply:?}"
        );
        took
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(7);
    let base = std::env::var_os("FAMILIAR_BENCH_DIR").map(PathBuf::from);
    let dir = match &base {
        Some(b) => tempfile::tempdir_in(b).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let b = Bench::new(dir.path());
    println!(
        "| size | write, no version kept | write, previous sent back | + kept (decode, SHA-256, fsync) | kept, per MB | undo of that file |"
    );
    println!("|---|---|---|---|---|---|");
    for &mb in SIZES_MB {
        let old = "o".repeat(mb << 20);
        let new = "n".repeat(mb << 20);
        let path = b.docs.join(format!("file-{mb}"));
        let mut plain = Vec::new();
        let mut sent = Vec::new();
        let mut kept = Vec::new();
        let mut undo = Vec::new();
        for i in 0..=runs {
            std::fs::write(&path, &old).unwrap();
            let p = b.write(&path, &new, false, false).await;
            std::fs::write(&path, &old).unwrap();
            let s = b.write(&path, &new, true, false).await;
            std::fs::write(&path, &old).unwrap();
            let k = b.write(&path, &new, true, true).await;
            // The undo of that write: the record as the tool leaves it.
            let task = TaskId::generate();
            let change = Change::Changed {
                path: path.clone(),
                before: Some(sha256_hex(old.as_bytes())),
                after: Some(sha256_hex(new.as_bytes())),
            };
            b.store
                .record_change(&task, &SoulId::new("bench").unwrap(), change)
                .unwrap();
            let start = Instant::now();
            familiar::store::undo::undo(&b.store, &b.versions, &b.trash, &task)
                .unwrap()
                .unwrap();
            let u = start.elapsed();
            assert_eq!(std::fs::read(&path).unwrap().len(), old.len());
            if i > 0 {
                plain.push(p);
                sent.push(s);
                kept.push(k);
                undo.push(u);
            }
        }
        let (p, s, k, u) = (median(plain), median(sent), median(kept), median(undo));
        let per_mb = k.saturating_sub(p) / u32::try_from(mb).unwrap();
        println!(
            "| {mb} MB | {} ms | {} ms | {} ms | +{} ms | {} ms |",
            ms(p),
            ms(s),
            ms(k),
            ms(per_mb),
            ms(u)
        );
    }
}
