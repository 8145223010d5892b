//! The usage-visibility part of `cluster.toml`: the `[metrics]` section (where ctld serves
//! Prometheus text and the status page) and the `[accounting]` section (how long hourly usage
//! rollups and per-job usage records are kept, and GPU-hour prices by GPU type for cost reports).

use serde::Deserialize;
use std::collections::BTreeMap;

/// The raw `[metrics]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    /// `host:port` of the HTTP listener (`/metrics`, `/`); port 0 picks a free port, which ctld
    /// writes to `<state_dir>/metrics.addr`.
    pub listen: Option<String>,
    /// Token a non-local browser must send (`Authorization: Bearer …` or `?token=…`) to see the
    /// status page; without it the page is served to localhost only. `/metrics` needs none.
    pub token: Option<String>,
    /// Addresses or networks (`10.0.0.5`, `10.0.0.0/24`, `::1`) the listener serves; a
    /// connection from anywhere else is closed as it is accepted. Empty or absent: everyone.
    #[serde(default)]
    pub allow: Vec<String>,
}

/// The raw `[accounting]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccounting {
    /// Days hourly rollups are kept (default 400).
    pub retention_hours_days: Option<u32>,
    /// Days per-job usage records are kept (default 90).
    pub retention_jobs_days: Option<u32>,
    /// Price of one GPU-hour by GPU type (lower-case), `"*"` for any other type.
    #[serde(default)]
    pub gpu_hour_price: BTreeMap<String, f64>,
    /// Idle-GPU policies, at most one per partition (`[[accounting.idle_gpu]]`).
    #[serde(default)]
    pub idle_gpu: Vec<RawIdleGpu>,
}

/// The raw `[[accounting.idle_gpu]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIdleGpu {
    pub partition: String,
    /// A job is idle while the mean utilization of its GPUs is below this (percent, default 5).
    pub threshold_percent: Option<u32>,
    /// How long a job may stay idle before `action`.
    pub after: RawDuration,
    /// `warn` (default), `cancel` or `requeue`.
    pub action: Option<String>,
    /// Optional earlier warning (audit record and ctld log) before `action`.
    pub warn_after: Option<RawDuration>,
}

/// A duration: a Slurm time string (`30:00`, `1-0`; minute resolution, as Slurm's time limits)
/// or a number of seconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawDuration {
    Seconds(u64),
    Slurm(String),
}

impl RawDuration {
    pub(crate) fn seconds(&self) -> Option<u64> {
        match self {
            RawDuration::Seconds(s) => Some(*s),
            RawDuration::Slurm(text) => crate::grammar::time::parse_time_limit(text).ok().and_then(|t| t.seconds()),
        }
    }

    pub(crate) fn text(&self) -> String {
        match self {
            RawDuration::Seconds(s) => s.to_string(),
            RawDuration::Slurm(text) => text.clone(),
        }
    }
}

/// What happens to a job whose GPUs stay idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleAction {
    Warn,
    Cancel,
    Requeue,
}

/// A validated idle-GPU policy for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleGpuPolicy {
    pub partition: String,
    pub threshold_percent: u32,
    pub after_secs: u64,
    pub action: IdleAction,
    pub warn_after_secs: Option<u64>,
}

/// Validated `[metrics]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsConfig {
    /// `None`: no HTTP listener.
    pub listen: Option<String>,
    pub token: Option<String>,
    /// The networks served (address, prefix length); empty: every address.
    pub allow: Vec<(std::net::IpAddr, u8)>,
}

impl MetricsConfig {
    /// Whether a connection from `peer` is served.
    pub fn allows(&self, peer: std::net::IpAddr) -> bool {
        self.allow.is_empty() || self.allow.iter().any(|(network, prefix)| in_network(peer, *network, *prefix))
    }
}

/// Whether `address` is in `network`/`prefix` (IPv4-mapped IPv6 peers count as IPv4).
fn in_network(address: std::net::IpAddr, network: std::net::IpAddr, prefix: u8) -> bool {
    use std::net::IpAddr;
    let address = match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    };
    match (address, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// `10.0.0.0/24`, `10.0.0.5` (a /32), `::1`: the network and its prefix length, or why not.
fn parse_network(text: &str) -> Result<(std::net::IpAddr, u8), String> {
    let (address, prefix) = match text.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (text, None),
    };
    let address: std::net::IpAddr =
        address.trim().parse().map_err(|_| format!("`{text}` is not an address or a network (10.0.0.0/24)"))?;
    let most = if address.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => most,
        Some(prefix) => prefix
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= most)
            .ok_or_else(|| format!("`{text}`: a prefix length is 0 to {most}"))?,
    };
    Ok((address, prefix))
}

/// Validated `[accounting]`.
#[derive(Debug, Clone, PartialEq)]
pub struct AccountingConfig {
    pub retention_hours_days: u32,
    pub retention_jobs_days: u32,
    /// GPU type (lower-case) → price of one GPU-hour; `"*"` is the default.
    pub gpu_hour_price: BTreeMap<String, f64>,
    pub idle_gpu: Vec<IdleGpuPolicy>,
}

impl Default for AccountingConfig {
    fn default() -> AccountingConfig {
        AccountingConfig {
            retention_hours_days: 400,
            retention_jobs_days: 90,
            gpu_hour_price: BTreeMap::new(),
            idle_gpu: Vec::new(),
        }
    }
}

impl AccountingConfig {
    /// The price of one GPU-hour of `gpu_type` (0 when no price is configured).
    pub fn price(&self, gpu_type: &str) -> f64 {
        let t = gpu_type.to_ascii_lowercase();
        self.gpu_hour_price.get(&t).or_else(|| self.gpu_hour_price.get("*")).copied().unwrap_or(0.0)
    }
}

impl RawMetrics {
    /// Checks the listen address's shape (`host:port`).
    pub fn validate(self) -> Result<MetricsConfig, (String, String)> {
        if let Some(listen) = &self.listen {
            let ok =
                listen.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                return Err(("metrics.listen".into(), format!("`{listen}` is not host:port")));
            }
        }
        let allow = self
            .allow
            .iter()
            .map(|text| parse_network(text))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|message| ("metrics.allow".to_owned(), message))?;
        Ok(MetricsConfig { listen: self.listen, token: self.token.filter(|t| !t.is_empty()), allow })
    }
}

impl RawAccounting {
    /// Applies defaults, checks prices are finite and not negative and that idle-GPU policies
    /// name known partitions (`partitions`), once each, with valid times.
    pub fn validate(self, partitions: &[&str]) -> Result<AccountingConfig, (String, String)> {
        let mut idle_gpu: Vec<IdleGpuPolicy> = Vec::new();
        for (i, raw) in self.idle_gpu.into_iter().enumerate() {
            let key = |k: &str| format!("accounting.idle_gpu[{i}].{k}");
            if !partitions.contains(&raw.partition.as_str()) {
                return Err((key("partition"), format!("unknown partition `{}`", raw.partition)));
            }
            if idle_gpu.iter().any(|p| p.partition == raw.partition) {
                return Err((key("partition"), format!("a second idle_gpu policy for `{}`", raw.partition)));
            }
            let secs = |k: &str, d: &RawDuration| {
                d.seconds()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| (key(k), format!("`{}` is not a time like \"30:00\" or seconds", d.text())))
            };
            let action = match raw.action.as_deref().unwrap_or("warn") {
                "warn" => IdleAction::Warn,
                "cancel" => IdleAction::Cancel,
                "requeue" => IdleAction::Requeue,
                other => return Err((key("action"), format!("`{other}` is not warn, cancel or requeue"))),
            };
            let threshold_percent = raw.threshold_percent.unwrap_or(5);
            if threshold_percent > 100 {
                return Err((key("threshold_percent"), "a percentage is at most 100".into()));
            }
            idle_gpu.push(IdleGpuPolicy {
                partition: raw.partition,
                threshold_percent,
                after_secs: secs("after", &raw.after)?,
                action,
                warn_after_secs: raw.warn_after.as_ref().map(|w| secs("warn_after", w)).transpose()?,
            });
        }
        let defaults = AccountingConfig::default();
        let mut prices = BTreeMap::new();
        for (name, price) in self.gpu_hour_price {
            if !price.is_finite() || price < 0.0 {
                return Err((format!("accounting.gpu_hour_price.{name}"), "a price must be a number >= 0".into()));
            }
            prices.insert(name.to_ascii_lowercase(), price);
        }
        Ok(AccountingConfig {
            retention_hours_days: self.retention_hours_days.unwrap_or(defaults.retention_hours_days),
            retention_jobs_days: self.retention_jobs_days.unwrap_or(defaults.retention_jobs_days),
            gpu_hour_price: prices,
            idle_gpu,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[metrics] allow` takes addresses and networks, refuses anything else, and serves only
    /// peers inside one of them (IPv4-mapped peers as IPv4).
    #[test]
    fn the_metrics_allow_list_matches_addresses_and_networks() {
        let raw = |allow: &[&str]| RawMetrics {
            listen: None,
            token: None,
            allow: allow.iter().map(|a| (*a).to_owned()).collect(),
        };
        let config = raw(&["127.0.0.2", "10.1.0.0/16", "fd00::/8"]).validate().unwrap();
        for (peer, served) in [
            ("127.0.0.2", true),
            ("127.0.0.1", false),
            ("10.1.200.3", true),
            ("10.2.0.1", false),
            ("::ffff:127.0.0.2", true),
            ("fd12::1", true),
            ("::1", false),
        ] {
            assert_eq!(config.allows(peer.parse().unwrap()), served, "{peer}");
        }
        assert!(raw(&[]).validate().unwrap().allows("192.0.2.1".parse().unwrap()), "empty: everyone");
        for bad in ["localhost", "10.0.0.0/33", "::/129", "10.0.0.0/x"] {
            assert!(raw(&[bad]).validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_must_be_host_port() {
        assert!(
            RawMetrics { listen: Some("127.0.0.1:9100".into()), token: None, allow: Vec::new() }.validate().is_ok()
        );
        assert!(RawMetrics { listen: Some("localhost:0".into()), token: None, allow: Vec::new() }.validate().is_ok());
        assert!(RawMetrics { listen: Some("9100".into()), token: None, allow: Vec::new() }.validate().is_err());
    }

    #[test]
    fn prices_fall_back_to_star() {
        let raw = RawAccounting {
            gpu_hour_price: [("H100".to_owned(), 4.0), ("*".to_owned(), 1.5)].into(),
            ..RawAccounting::default()
        };
        let config = raw.validate(&[]).unwrap();
        assert_eq!(config.price("h100"), 4.0);
        assert_eq!(config.price("t4"), 1.5);
        assert_eq!(config.retention_jobs_days, 90);
    }

    #[test]
    fn idle_gpu_policies_are_checked() {
        let raw = |partition: &str, after: &str, action: &str| RawAccounting {
            idle_gpu: vec![RawIdleGpu {
                partition: partition.into(),
                threshold_percent: None,
                after: RawDuration::Slurm(after.into()),
                action: Some(action.into()),
                warn_after: Some(RawDuration::Seconds(600)),
            }],
            ..RawAccounting::default()
        };
        let config = raw("gpu", "1:00:00", "cancel").validate(&["gpu"]).unwrap();
        assert_eq!(
            config.idle_gpu,
            [IdleGpuPolicy {
                partition: "gpu".into(),
                threshold_percent: 5,
                after_secs: 3600,
                action: IdleAction::Cancel,
                warn_after_secs: Some(600)
            }]
        );
        assert_eq!(
            raw("cpu", "1:00:00", "cancel").validate(&["gpu"]).unwrap_err().0,
            "accounting.idle_gpu[0].partition"
        );
        assert_eq!(raw("gpu", "soon", "cancel").validate(&["gpu"]).unwrap_err().0, "accounting.idle_gpu[0].after");
        assert_eq!(raw("gpu", "30:00", "kill").validate(&["gpu"]).unwrap_err().0, "accounting.idle_gpu[0].action");
    }
}
