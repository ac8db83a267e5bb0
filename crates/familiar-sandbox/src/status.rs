//! How much of the sandbox the kernel enforces: the Landlock ABI, full / partial /
//! none, and the restrictions that are missing.
//!
//! The invariant: [`probe`] never restricts the calling process (the daemon must stay
//! unrestricted); it only creates throw-away ruleset file descriptors to learn the ABI.
//! "Full" means every restriction familiar asks for, all of which ABI 6 provides
//! ([`TARGET_ABI`]); later ABIs add nothing we request.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope,
};
use serde::{Deserialize, Serialize};

use crate::seccomp::{self, UnixSockets};

/// The ABI that provides every restriction familiar asks for.
pub(crate) const TARGET_ABI: u8 = 6;

/// The variable that makes the helper act as if the kernel had a lower ABI, so
/// tests can see a partial enforcement. Only the helper reads it, and it can only
/// lower what is enforced, which the report then says.
pub const TEST_ABI_ENV: &str = "FAMILIAR_TEST_LANDLOCK_ABI";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnforcementStatus {
    Full,
    Partial,
    None,
}

impl EnforcementStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EnforcementStatus::Full => "full",
            EnforcementStatus::Partial => "partial",
            EnforcementStatus::None => "none",
        }
    }
}

/// What the kernel enforces, for `familiar status`, events and the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// The Landlock ABI in use; `None` without Landlock.
    pub abi: Option<u8>,
    pub status: EnforcementStatus,
    /// Restrictions asked for but not enforced, e.g. `"tcp connect/bind (ABI 4)"`.
    pub missing: Vec<String>,
    /// Unix sockets (the session bus, the keyring, display servers): blocked by the
    /// helper's seccomp filter, granted by the soul, or open without seccomp.
    #[serde(default)]
    pub unix_sockets: UnixSockets,
    /// The sockets a soul grants (`[sandbox] sockets`), when it grants any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sockets: Vec<std::path::PathBuf>,
}

impl Enforcement {
    /// What an ABI gives, before the ruleset is even built.
    pub fn for_abi(abi: Option<u8>) -> Enforcement {
        let Some(v) = abi.filter(|v| *v > 0) else {
            return Enforcement {
                abi: None,
                status: EnforcementStatus::None,
                missing: vec!["landlock".to_owned()],
                unix_sockets: UnixSockets::Blocked,
                sockets: Vec::new(),
            };
        };
        let missing: Vec<String> = FEATURES
            .iter()
            .filter(|(since, _)| v < *since)
            .map(|(since, what)| format!("{what} (ABI {since})"))
            .collect();
        let status = if missing.is_empty() {
            EnforcementStatus::Full
        } else {
            EnforcementStatus::Partial
        };
        Enforcement {
            abi: Some(v),
            status,
            missing,
            unix_sockets: UnixSockets::Blocked,
            sockets: Vec::new(),
        }
    }

    /// Records how unix sockets stand: `Open` (the filter could not be installed)
    /// makes the enforcement partial.
    pub fn with_unix_sockets(mut self, unix: UnixSockets) -> Enforcement {
        if unix == UnixSockets::Open {
            self.missing.push(UNIX_SOCKET_BLOCK.to_owned());
            if self.status == EnforcementStatus::Full {
                self.status = EnforcementStatus::Partial;
            }
        }
        self.unix_sockets = unix;
        self
    }

    /// This enforcement for a task whose soul grants `sockets`.
    pub fn for_sockets(&self, sockets: &[std::path::PathBuf]) -> Enforcement {
        let mut e = self.clone();
        if !sockets.is_empty() && e.unix_sockets == UnixSockets::Blocked {
            e.unix_sockets = UnixSockets::Granted;
        }
        e.sockets = sockets.to_vec();
        e
    }
}

/// Named in `missing` when the helper cannot refuse unix sockets.
pub(crate) const UNIX_SOCKET_BLOCK: &str = "unix socket block (seccomp)";

/// Restrictions and the ABI that brought them.
const FEATURES: &[(u8, &str)] = &[
    (2, "cross-directory link/rename (refer)"),
    (3, "truncate"),
    (4, "tcp connect/bind"),
    (5, "device ioctl"),
    (6, "signal and abstract unix socket scoping"),
];

/// The Landlock ABI of the running kernel, capped at [`TARGET_ABI`]; `None` without
/// Landlock. Learnt by asking for each ABI's rights as a hard requirement and creating
/// (never enforcing) the ruleset.
pub(crate) fn kernel_abi() -> Option<u8> {
    (1..=TARGET_ABI)
        .rev()
        .find(|v| ruleset_for(abi_from(*v)).is_ok())
}

fn ruleset_for(abi: ABI) -> Result<(), landlock::RulesetError> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))?;
    if abi >= ABI::V4 {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    ruleset.create().map(drop)
}

/// The enforcement a sandboxed call gets on this kernel, without restricting anyone.
pub fn probe() -> Enforcement {
    let unix = if seccomp::available() {
        UnixSockets::Blocked
    } else {
        UnixSockets::Open
    };
    Enforcement::for_abi(kernel_abi()).with_unix_sockets(unix)
}

/// The landlock crate's name for ABI `v` (it only converts from integers).
pub(crate) fn abi_from(v: u8) -> ABI {
    ABI::from(i32::from(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_3_misses_network_and_scopes() {
        let e = Enforcement::for_abi(Some(3));
        assert_eq!(e.status, EnforcementStatus::Partial);
        assert_eq!(
            e.missing,
            [
                "tcp connect/bind (ABI 4)",
                "device ioctl (ABI 5)",
                "signal and abstract unix socket scoping (ABI 6)"
            ]
        );
    }

    #[test]
    fn target_abi_is_full_and_no_abi_is_none() {
        assert_eq!(
            Enforcement::for_abi(Some(TARGET_ABI)).status,
            EnforcementStatus::Full
        );
        assert_eq!(Enforcement::for_abi(None).status, EnforcementStatus::None);
    }

    #[test]
    fn probe_does_not_restrict_the_caller() {
        let e = probe();
        // Still able to read outside any ruleset's trees after probing.
        std::fs::read_dir("/").unwrap();
        if e.abi.is_none() {
            eprintln!("SKIP: this kernel has no Landlock");
        }
    }
}
