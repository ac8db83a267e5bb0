//! Conditions a request runs under (`--when ac,battery>50,load<1.5,idle>10m,unlocked,
//! metered=no`): parsed once, checked against the machine right before a task's first
//! model call, and waited for (`--wait`) without holding a task slot.
//!
//! Where each fact comes from: UPower (`OnBattery`, the display device's `Percentage`) on
//! the system bus, or `/sys/class/power_supply` when UPower does not answer; the 1-minute
//! load average from `/proc/loadavg`; logind's user object (`IdleHint`,
//! `IdleSinceHint`) and its display session (`LockedHint`); NetworkManager's `Metered`.
//! A fact that cannot be read leaves its condition unmet, with the reason, except that a
//! machine without a battery is on mains power and NetworkManager's absence means no
//! metered connection is known.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::dbus::desktop::{
    LOGIND, Login1ManagerProxy, Login1SessionProxy, Login1UserProxy, NETWORK_MANAGER,
    NetworkManagerProxy, UPOWER, UPowerDeviceProxy, UPowerProxy,
};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// How long one fact may take to read before it counts as unknown.
const READ_TIMEOUT: Duration = Duration::from_secs(3);
/// While waiting, facts without a change signal (the load average) are read again
/// this often.
pub const RECHECK: Duration = Duration::from_secs(30);

/// One condition of `--when`.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `ac`: on mains power.
    Ac,
    /// `battery>N`: the battery above N percent.
    BatteryAbove(u8),
    /// `load<N`: the 1-minute load average below N.
    LoadBelow(f64),
    /// `idle>DURATION`: the user idle for longer than that.
    IdleFor(Duration),
    /// `unlocked`: the graphical session is not locked.
    Unlocked,
    /// `metered=no`: the network connection is not metered.
    Unmetered,
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Condition::Ac => f.write_str("ac"),
            Condition::BatteryAbove(n) => write!(f, "battery>{n}"),
            Condition::LoadBelow(n) => write!(f, "load<{n}"),
            Condition::IdleFor(d) => write!(f, "idle>{}", humantime::format_duration(*d)),
            Condition::Unlocked => f.write_str("unlocked"),
            Condition::Unmetered => f.write_str("metered=no"),
        }
    }
}

/// Every condition of one `--when`, all of which must hold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Conditions(pub Vec<Condition>);

impl fmt::Display for Conditions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

/// A `--when` value that is not a list of conditions: what is wrong, and the syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidConditions(String);

/// Why a fact a condition needs could not be read (the condition then does not hold).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConditionError {
    #[error("the system bus cannot be reached: {0}")]
    NoSystemBus(zbus::Error),
    #[error("the system bus did not answer")]
    SystemBusSilent,
    #[error("{service} did not answer")]
    Silent { service: &'static str },
    #[error("{service}: {error}")]
    Bus {
        service: &'static str,
        error: zbus::Error,
    },
    #[error("logind knows no graphical session of this user")]
    NoGraphicalSession,
    #[error("{path}: {detail}")]
    Read { path: &'static str, detail: String },
}

impl ConditionError {
    /// Whether the service is not on the bus at all (and nothing can start it).
    fn is_service_unknown(&self) -> bool {
        match self {
            ConditionError::Bus { error, .. } => match error {
                // Not activatable, or activatable but not running.
                zbus::Error::MethodError(name, _, _) => matches!(
                    name.as_str(),
                    "org.freedesktop.DBus.Error.ServiceUnknown"
                        | "org.freedesktop.DBus.Error.NameHasNoOwner"
                ),
                zbus::Error::FDO(e) => matches!(
                    **e,
                    zbus::fdo::Error::ServiceUnknown(_) | zbus::fdo::Error::NameHasNoOwner(_)
                ),
                _ => false,
            },
            ConditionError::NoSystemBus(_)
            | ConditionError::SystemBusSilent
            | ConditionError::Silent { .. }
            | ConditionError::NoGraphicalSession
            | ConditionError::Read { .. } => false,
        }
    }
}

pub const SYNTAX: &str =
    "ac, battery>N (percent), load<N, idle>DURATION (e.g. 10m), unlocked, metered=no";

impl FromStr for Conditions {
    type Err = InvalidConditions;

    fn from_str(s: &str) -> Result<Conditions, InvalidConditions> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad =
                |why: &str| InvalidConditions(format!("`{part}`: {why} (conditions: {SYNTAX})"));
            let c = if part == "ac" {
                Condition::Ac
            } else if part == "unlocked" {
                Condition::Unlocked
            } else if part == "metered=no" {
                Condition::Unmetered
            } else if let Some(n) = part.strip_prefix("battery>") {
                match n.trim_end_matches('%').parse::<u8>() {
                    Ok(n) if n < 100 => Condition::BatteryAbove(n),
                    _ => return Err(bad("the percentage must be a whole number below 100")),
                }
            } else if let Some(n) = part.strip_prefix("load<") {
                match n.parse::<f64>() {
                    Ok(n) if n.is_finite() && n > 0.0 => Condition::LoadBelow(n),
                    _ => return Err(bad("the load must be a positive number")),
                }
            } else if let Some(d) = part.strip_prefix("idle>") {
                match humantime::parse_duration(d) {
                    Ok(d) if !d.is_zero() => Condition::IdleFor(d),
                    _ => return Err(bad("the idle time must be a duration like 10m")),
                }
            } else {
                return Err(bad("unknown condition"));
            };
            if !out.contains(&c) {
                out.push(c);
            }
        }
        if out.is_empty() {
            return Err(InvalidConditions(format!(
                "no condition given (conditions: {SYNTAX})"
            )));
        }
        Ok(Conditions(out))
    }
}

/// Why a condition does not hold, in words for the journal and the notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmet(pub Vec<String>);

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

/// Reads the facts the conditions need.
pub struct Checker {
    /// `None` when the system bus cannot be reached (the reason kept).
    system: Result<zbus::Connection, ConditionError>,
}

impl Checker {
    /// Connects to the system bus (`DBUS_SYSTEM_BUS_ADDRESS` when set).
    pub async fn connect() -> Checker {
        let system = match tokio::time::timeout(READ_TIMEOUT, zbus::Connection::system()).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(ConditionError::NoSystemBus(e)),
            Err(_) => Err(ConditionError::SystemBusSilent),
        };
        Checker { system }
    }

    /// Reads from `system` (standing for the system bus: a test's private one).
    pub fn on(system: zbus::Connection) -> Checker {
        Checker { system: Ok(system) }
    }

    /// The conditions that do not hold now, each with its reason; `None` when all do.
    /// Also when an `idle>` condition will hold by itself if nothing changes: how long
    /// until then.
    pub async fn check(&self, conditions: &Conditions) -> (Option<Unmet>, Option<Duration>) {
        let mut unmet = Vec::new();
        let mut idle_in = None;
        for c in &conditions.0 {
            match self.check_one(c).await {
                Ok(()) => {}
                Err((why, soon)) => {
                    unmet.push(why);
                    idle_in = match (idle_in, soon) {
                        (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
                        (a, b) => a.or(b),
                    };
                }
            }
        }
        ((!unmet.is_empty()).then_some(Unmet(unmet)), idle_in)
    }

    async fn check_one(&self, c: &Condition) -> Result<(), (String, Option<Duration>)> {
        let plain = |why: String| (why, None);
        match c {
            Condition::Ac => match self.on_battery().await {
                Ok(false) => Ok(()),
                Ok(true) => Err(plain("on battery (needs ac)".to_owned())),
                Err(e) => Err(plain(format!("cannot tell whether on ac: {e}"))),
            },
            Condition::BatteryAbove(n) => match self.battery_percent().await {
                Ok(None) => Ok(()),
                Ok(Some(p)) if p > f64::from(*n) => Ok(()),
                Ok(Some(p)) => Err(plain(format!("battery at {p:.0}% (needs >{n}%)"))),
                Err(e) => Err(plain(format!("cannot read the battery: {e}"))),
            },
            Condition::LoadBelow(n) => match load_average() {
                Ok(l) if l < *n => Ok(()),
                Ok(l) => Err(plain(format!("load {l:.2} (needs <{n})"))),
                Err(e) => Err(plain(format!("cannot read the load average: {e}"))),
            },
            Condition::IdleFor(want) => match self.idle_for().await {
                Ok(Some(idle)) if idle > *want => Ok(()),
                Ok(Some(idle)) => Err((
                    format!(
                        "idle for {} (needs >{})",
                        humantime::format_duration(Duration::from_secs(idle.as_secs())),
                        humantime::format_duration(*want)
                    ),
                    Some(*want - idle + Duration::from_millis(100)),
                )),
                Ok(None) => Err(plain(format!(
                    "the user is active (needs idle >{})",
                    humantime::format_duration(*want)
                ))),
                Err(e) => Err(plain(format!("cannot tell how long the user is idle: {e}"))),
            },
            Condition::Unlocked => match self.locked().await {
                Ok(false) => Ok(()),
                Ok(true) => Err(plain("the session is locked".to_owned())),
                Err(e) => Err(plain(format!(
                    "cannot tell whether the session is locked: {e}"
                ))),
            },
            Condition::Unmetered => match self.metered().await {
                Ok(false) => Ok(()),
                Ok(true) => Err(plain("the network connection is metered".to_owned())),
                Err(e) => Err(plain(format!(
                    "cannot tell whether the network is metered: {e}"
                ))),
            },
        }
    }

    fn bus(&self) -> Result<&zbus::Connection, ConditionError> {
        self.system.as_ref().map_err(Clone::clone)
    }

    /// UPower's `OnBattery`, else the power supplies in sysfs.
    async fn on_battery(&self) -> Result<bool, ConditionError> {
        let asked = async {
            let upower = read(UPOWER, fresh(UPowerProxy::builder(self.bus()?))).await?;
            read(UPOWER, upower.on_battery()).await
        };
        match asked.await {
            Ok(b) => Ok(b),
            Err(e) => {
                tracing::debug!("UPower: {e}; reading /sys/class/power_supply");
                sysfs_power().map(|p| p.on_battery)
            }
        }
    }

    /// The battery's charge, `None` without a battery.
    async fn battery_percent(&self) -> Result<Option<f64>, ConditionError> {
        let asked = async {
            let device = read(UPOWER, fresh(UPowerDeviceProxy::builder(self.bus()?))).await?;
            match read(UPOWER, device.is_present()).await? {
                false => Ok(None),
                true => read(UPOWER, device.percentage()).await.map(Some),
            }
        };
        match asked.await {
            Ok(p) => Ok(p),
            Err(e) => {
                tracing::debug!("UPower: {e}; reading /sys/class/power_supply");
                sysfs_power().map(|p| p.battery_percent)
            }
        }
    }

    /// How long the user has been idle; `None` when they are not.
    async fn idle_for(&self) -> Result<Option<Duration>, ConditionError> {
        let user = self.logind_user().await?;
        if !read(LOGIND, user.idle_hint()).await? {
            return Ok(None);
        }
        let since_us = read(LOGIND, user.idle_since_hint()).await?;
        let since = UNIX_EPOCH + Duration::from_micros(since_us);
        Ok(Some(
            SystemTime::now()
                .duration_since(since)
                .unwrap_or(Duration::ZERO),
        ))
    }

    /// Whether the user's graphical session is locked (`type_text` asks it too).
    pub async fn locked(&self) -> Result<bool, ConditionError> {
        let user = self.logind_user().await?;
        let (id, session) = read(LOGIND, user.display()).await?;
        if id.is_empty() {
            return Err(ConditionError::NoGraphicalSession);
        }
        let builder = Login1SessionProxy::builder(self.bus()?).path(session);
        let session = read(LOGIND, fresh(builder)).await?;
        read(LOGIND, session.locked_hint()).await
    }

    /// NetworkManager's `Metered` (yes and guess-yes count); not metered when
    /// NetworkManager is not there to ask: not on the system bus (not activatable, or
    /// not running), or no system bus at all (a container, a minimal install), which
    /// skipped `metered=no` though the docs say it holds.
    async fn metered(&self) -> Result<bool, ConditionError> {
        let bus = match self.bus() {
            Ok(bus) => bus,
            Err(e) => {
                tracing::debug!("no system bus, so no NetworkManager: not metered ({e})");
                return Ok(false);
            }
        };
        let asked = async {
            let nm = read(NETWORK_MANAGER, fresh(NetworkManagerProxy::builder(bus))).await?;
            read(NETWORK_MANAGER, nm.metered()).await
        };
        match asked.await {
            // NMMetered: 0 unknown, 1 yes, 2 no, 3 guess-yes, 4 guess-no.
            Ok(m) => Ok(m == 1 || m == 3),
            Err(e) if e.is_service_unknown() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// logind's object for this user.
    async fn logind_user(&self) -> Result<Login1UserProxy<'_>, ConditionError> {
        let bus = self.bus()?;
        let manager = read(LOGIND, fresh(Login1ManagerProxy::builder(bus))).await?;
        let uid = nix::unistd::getuid().as_raw();
        let path = read(LOGIND, manager.get_user(uid)).await?;
        let builder = Login1UserProxy::builder(bus).path(path);
        read(LOGIND, fresh(builder)).await
    }

    /// Waits until every condition holds, `wait` passes, or `cancel` fires; what still
    /// does not hold then (`None`: all hold). Rechecks whenever a service on the system
    /// bus announces a changed property, when an `idle>` condition is due to hold, and
    /// every [`RECHECK`].
    pub async fn wait_until(
        &self,
        conditions: &Conditions,
        wait: Duration,
        cancel: &CancellationToken,
    ) -> Option<Unmet> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut changes = match self.bus() {
            Ok(bus) => property_changes(bus).await,
            Err(_) => None,
        };
        loop {
            let (unmet, idle_in) = self.check(conditions).await;
            let unmet = unmet?;
            let now = tokio::time::Instant::now();
            if now >= deadline || cancel.is_cancelled() {
                return Some(unmet);
            }
            let next = idle_in.map_or(RECHECK, |d| d.min(RECHECK));
            let wake = std::cmp::min(deadline, now + next);
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                () = cancel.cancelled() => return Some(unmet),
                Some(_) = next_change(&mut changes) => {}
            }
        }
    }
}

/// A proxy that reads each property fresh: a condition is read when it is checked, and
/// a caching proxy would subscribe to every change for one read.
async fn fresh<'a, P>(builder: zbus::proxy::Builder<'a, P>) -> zbus::Result<P>
where
    P: From<zbus::Proxy<'a>> + zbus::proxy::Defaults,
{
    builder
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
}

/// One read from `service` on the system bus, bounded by [`READ_TIMEOUT`].
async fn read<T>(
    service: &'static str,
    read: impl std::future::Future<Output = zbus::Result<T>>,
) -> Result<T, ConditionError> {
    tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .map_err(|_| ConditionError::Silent { service })?
        .map_err(|error| ConditionError::Bus { service, error })
}

/// A stream of `PropertiesChanged` signals on the system bus, if it can be had.
async fn property_changes(bus: &zbus::Connection) -> Option<zbus::MessageStream> {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .interface("org.freedesktop.DBus.Properties")
        .member("PropertiesChanged")
        .build()
        .inspect_err(|e| tracing::debug!("match rule: {e}"))
        .ok()?;
    zbus::MessageStream::for_match_rule(rule, bus, std::num::NonZeroUsize::new(16))
        .await
        .inspect_err(|e| tracing::debug!("cannot watch property changes: {e}"))
        .ok()
}

async fn next_change(changes: &mut Option<zbus::MessageStream>) -> Option<()> {
    match changes {
        Some(s) => s.next().await.map(|_| ()),
        None => std::future::pending().await,
    }
}

/// The 1-minute load average.
fn load_average() -> Result<f64, ConditionError> {
    const PATH: &str = "/proc/loadavg";
    let text = std::fs::read_to_string(PATH).map_err(|e| ConditionError::Read {
        path: PATH,
        detail: e.to_string(),
    })?;
    text.split_whitespace()
        .next()
        .and_then(|l| l.parse().ok())
        .ok_or_else(|| ConditionError::Read {
            path: PATH,
            detail: format!("says {text:?}"),
        })
}

struct SysfsPower {
    on_battery: bool,
    battery_percent: Option<f64>,
}

/// `/sys/class/power_supply`: on battery when a battery discharges and no mains supply
/// is online; the mean charge of the batteries.
fn sysfs_power() -> Result<SysfsPower, ConditionError> {
    const DIR: &str = "/sys/class/power_supply";
    let dir = std::path::Path::new(DIR);
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(SysfsPower {
                on_battery: false,
                battery_percent: None,
            });
        }
        Err(e) => {
            return Err(ConditionError::Read {
                path: DIR,
                detail: e.to_string(),
            });
        }
    };
    let read = |p: &std::path::Path, f: &str| {
        std::fs::read_to_string(p.join(f))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    let (mut mains_online, mut discharging, mut charges) = (false, false, Vec::new());
    for e in entries.flatten() {
        let p = e.path();
        match read(&p, "type").as_str() {
            "Mains" | "USB" => mains_online |= read(&p, "online") == "1",
            "Battery" => {
                discharging |= read(&p, "status") == "Discharging";
                if let Ok(c) = read(&p, "capacity").parse::<f64>() {
                    charges.push(c);
                }
            }
            _ => {}
        }
    }
    let battery_percent =
        (!charges.is_empty()).then(|| charges.iter().sum::<f64>() / charges.len() as f64);
    Ok(SysfsPower {
        on_battery: discharging && !mains_online,
        battery_percent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_parse_and_print_back() {
        let c: Conditions = "ac, battery>50,load<1.5,idle>10m,unlocked,metered=no,ac"
            .parse()
            .unwrap();
        assert_eq!(c.0.len(), 6, "duplicates once");
        assert_eq!(
            c.to_string(),
            "ac,battery>50,load<1.5,idle>10m,unlocked,metered=no"
        );
        assert_eq!(c.to_string().parse::<Conditions>().unwrap(), c);
    }

    #[test]
    fn bad_conditions_say_what_is_accepted() {
        for (s, want) in [
            ("", "no condition given"),
            (
                "battery>150",
                "`battery>150`: the percentage must be a whole number below 100",
            ),
            ("load<-1", "`load<-1`: the load must be a positive number"),
            (
                "idle>soon",
                "`idle>soon`: the idle time must be a duration like 10m",
            ),
            (
                "charging",
                "`charging`: unknown condition (conditions: ac, battery>N",
            ),
        ] {
            let e = s.parse::<Conditions>().unwrap_err().to_string();
            assert!(e.starts_with(want), "{s}: {e}");
        }
    }
}
