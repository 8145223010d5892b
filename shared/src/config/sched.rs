//! The scheduling part of `cluster.toml`: the `[priority]` section (multifactor weights, fair-share
//! algorithm, decay half-life, `PriorityMaxAge`), TRES limit lists (`GrpTRES=gres/gpu=4,cpu=64`) and
//! TRES billing weights (`CPU=1.0,Mem=0.25G,GRES/gpu:h100=8`), in Slurm's spelling.
//!
//! TRES names are kept lower-case: `cpu`, `mem` (megabytes), `node`, `billing`, `gres/gpu` (any
//! type) and `gres/gpu:<type>`.

use crate::grammar::time::{TimeLimit, parse_time_limit};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The raw `[priority]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPriority {
    /// `fair_tree` (default) or `classic`.
    pub fairshare: Option<String>,
    pub weight_age: Option<u32>,
    pub weight_assoc: Option<u32>,
    pub weight_fairshare: Option<u32>,
    pub weight_job_size: Option<u32>,
    pub weight_partition: Option<u32>,
    pub weight_qos: Option<u32>,
    /// `PriorityWeightTRES`: `"CPU=1000,Mem=2000,GRES/gpu=3000"`.
    pub weight_tres: Option<String>,
    /// `PriorityMaxAge`, default `7-0`.
    pub max_age: Option<String>,
    /// `PriorityDecayHalfLife`, default `7-0`; `0` = no decay.
    pub decay_half_life: Option<String>,
    /// `PriorityFavorSmall`.
    #[serde(default)]
    pub favor_small: bool,
    /// How many blocked jobs a pass plans a backfill reservation for, highest priority first
    /// (Slurm's `bf_max_job_test`); jobs that hold one from the last pass are always planned.
    /// `backfill_reservations` is the key's earlier name.
    #[serde(alias = "backfill_reservations")]
    pub backfill_max_job_test: Option<u32>,
}

/// TRES name → weight. Parsing refuses NaN, so equality is total.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TresWeights(pub BTreeMap<String, f64>);

impl Eq for TresWeights {}

impl TresWeights {
    /// The weight of a TRES, 0 when not configured.
    pub fn get(&self, name: &str) -> f64 {
        self.0.get(name).copied().unwrap_or(0.0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A raw `[[quotas]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQuota {
    pub account: toml::Spanned<String>,
    /// The pool: a partition.
    pub partition: toml::Spanned<String>,
    /// TRES the account (and everything below it) is guaranteed in the pool: `"gres/gpu=16"`.
    pub guarantee: toml::Spanned<String>,
    /// Most the account may hold in the pool, borrowed included; absent = no limit.
    pub burst: Option<toml::Spanned<String>>,
    /// Most of its idle guarantee others may borrow; absent = all of it.
    pub lend: Option<toml::Spanned<String>>,
}

/// A guaranteed quota of an account in a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaConfig {
    pub account: String,
    pub partition: String,
    pub guarantee: BTreeMap<String, u64>,
    pub burst: BTreeMap<String, u64>,
    pub lend: Option<BTreeMap<String, u64>>,
}

/// Which fair-share algorithm runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FairShareAlgorithm {
    /// Slurm's default since 19.05.
    FairTree,
    /// `PriorityFlags=NO_FAIR_TREE`.
    Classic,
}

/// Blocked jobs tested for a backfill reservation per pass by default (Slurm's `bf_max_job_test`
/// default).
pub const DEFAULT_BACKFILL_MAX_JOB_TEST: u32 = 500;
/// The most a config may ask for (Slurm's own bound on `bf_max_job_test`).
pub const MAX_BACKFILL_MAX_JOB_TEST: u32 = 1_000_000;

/// The validated `[priority]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorityConfig {
    pub fairshare: FairShareAlgorithm,
    pub weight_age: u32,
    pub weight_assoc: u32,
    pub weight_fairshare: u32,
    pub weight_job_size: u32,
    pub weight_partition: u32,
    pub weight_qos: u32,
    /// TRES name → weight (may be negative).
    pub weight_tres: TresWeights,
    /// Seconds.
    pub max_age: u64,
    /// Seconds; 0 = no decay.
    pub decay_half_life: u64,
    pub favor_small: bool,
    /// Blocked jobs tested for a backfill reservation per pass; 0 = no reservations.
    pub backfill_max_job_test: u32,
}

impl Default for PriorityConfig {
    /// Drover's defaults: the weights of the reference cluster rather than Slurm's all-zero ones,
    /// so fair share, age and QOS matter out of the box.
    fn default() -> PriorityConfig {
        PriorityConfig {
            fairshare: FairShareAlgorithm::FairTree,
            weight_age: 1000,
            weight_assoc: 0,
            weight_fairshare: 10000,
            weight_job_size: 1000,
            weight_partition: 5000,
            weight_qos: 2000,
            weight_tres: TresWeights::default(),
            max_age: 7 * 86400,
            decay_half_life: 7 * 86400,
            favor_small: false,
            backfill_max_job_test: DEFAULT_BACKFILL_MAX_JOB_TEST,
        }
    }
}

fn seconds(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        return Ok(0);
    }
    match parse_time_limit(text).map_err(|e| e.to_string())? {
        TimeLimit::Minutes(m) => Ok(u64::from(m) * 60),
        TimeLimit::Unlimited => Err("expected a finite duration such as `7-0` or `14-00:00:00`".into()),
    }
}

impl RawPriority {
    /// Validates the section; the error names the key.
    pub fn validate(&self) -> Result<PriorityConfig, (&'static str, String)> {
        let d = PriorityConfig::default();
        let fairshare = match self.fairshare.as_deref() {
            None | Some("fair_tree") => FairShareAlgorithm::FairTree,
            Some("classic") => FairShareAlgorithm::Classic,
            Some(other) => return Err(("priority.fairshare", format!("`{other}`: expected `fair_tree` or `classic`"))),
        };
        Ok(PriorityConfig {
            fairshare,
            weight_age: self.weight_age.unwrap_or(d.weight_age),
            weight_assoc: self.weight_assoc.unwrap_or(d.weight_assoc),
            weight_fairshare: self.weight_fairshare.unwrap_or(d.weight_fairshare),
            weight_job_size: self.weight_job_size.unwrap_or(d.weight_job_size),
            weight_partition: self.weight_partition.unwrap_or(d.weight_partition),
            weight_qos: self.weight_qos.unwrap_or(d.weight_qos),
            weight_tres: match &self.weight_tres {
                Some(text) => parse_tres_weights(text).map_err(|e| ("priority.weight_tres", e))?,
                None => TresWeights::default(),
            },
            max_age: match &self.max_age {
                Some(text) => seconds(text).map_err(|e| ("priority.max_age", e))?,
                None => d.max_age,
            },
            decay_half_life: match &self.decay_half_life {
                Some(text) => seconds(text).map_err(|e| ("priority.decay_half_life", e))?,
                None => d.decay_half_life,
            },
            favor_small: self.favor_small,
            backfill_max_job_test: match self.backfill_max_job_test {
                Some(n) if n > MAX_BACKFILL_MAX_JOB_TEST => {
                    return Err((
                        "priority.backfill_max_job_test",
                        format!("{n}: at most {MAX_BACKFILL_MAX_JOB_TEST} jobs per pass"),
                    ));
                }
                Some(n) => n,
                None => d.backfill_max_job_test,
            },
        })
    }
}

/// Normalizes a TRES name: `CPU` → `cpu`, `GRES/gpu:H100` → `gres/gpu:h100`, `gpu` → `gres/gpu`.
fn tres_name(name: &str) -> Result<String, String> {
    let name = name.trim().to_ascii_lowercase();
    let name = if name == "gpu" || name.starts_with("gpu:") { format!("gres/{name}") } else { name };
    let known = matches!(name.as_str(), "cpu" | "mem" | "node" | "billing" | "energy")
        || name == "gres/gpu"
        || name.strip_prefix("gres/gpu:").is_some_and(|t| !t.is_empty());
    if known {
        Ok(name)
    } else {
        Err(format!("unknown TRES `{name}` (cpu, mem, node, billing, gres/gpu, gres/gpu:<type>)"))
    }
}

fn items(text: &str) -> impl Iterator<Item = Result<(&str, &str), String>> {
    text.split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(|item| item.split_once('=').ok_or_else(|| format!("`{item}`: expected NAME=VALUE")))
}

/// Parses a TRES limit list (`cpu=64,mem=200G,gres/gpu=8,gres/gpu:h100=4`); memory in MB, with
/// an optional K/M/G/T suffix.
pub fn parse_tres_limits(text: &str) -> Result<BTreeMap<String, u64>, String> {
    let mut limits = BTreeMap::new();
    for item in items(text) {
        let (name, value) = item?;
        let name = tres_name(name)?;
        let value = value.trim();
        let (digits, scale) = match value.char_indices().last() {
            Some((i, c)) if c.is_ascii_alphabetic() && name == "mem" => {
                let scale = match c.to_ascii_uppercase() {
                    'K' => 1.0 / 1024.0,
                    'M' => 1.0,
                    'G' => 1024.0,
                    'T' => 1024.0 * 1024.0,
                    _ => return Err(format!("`{value}`: unknown memory suffix")),
                };
                (&value[..i], scale)
            }
            _ => (value, 1.0),
        };
        let count: u64 = digits.parse().map_err(|_| format!("`{value}`: expected a count"))?;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        let count = (count as f64 * scale).ceil() as u64;
        limits.insert(name, count);
    }
    Ok(limits)
}

/// Parses `TRESBillingWeights` or `PriorityWeightTRES` (`CPU=1.0,Mem=0.25G,GRES/gpu:h100=8`). A
/// K/M/G/T suffix on a memory weight means "per KB/MB/GB/TB", so the stored weight is per MB.
pub fn parse_tres_weights(text: &str) -> Result<TresWeights, String> {
    let mut weights = BTreeMap::new();
    for item in items(text) {
        let (name, value) = item?;
        let name = tres_name(name)?;
        let value = value.trim();
        let (number, per_mb) = match value.chars().last() {
            Some(c) if c.is_ascii_alphabetic() => {
                let divide = match c.to_ascii_uppercase() {
                    'K' => 1.0 / 1024.0,
                    'M' => 1.0,
                    'G' => 1024.0,
                    'T' => 1024.0 * 1024.0,
                    _ => return Err(format!("`{value}`: unknown suffix")),
                };
                (&value[..value.len() - 1], divide)
            }
            _ => (value, 1.0),
        };
        let weight: f64 = number.parse().map_err(|_| format!("`{value}`: expected a number"))?;
        if !weight.is_finite() {
            return Err(format!("`{value}`: expected a finite number"));
        }
        weights.insert(name, weight / per_mb);
    }
    Ok(TresWeights(weights))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tres_lists_parse_in_slurm_spelling() {
        let limits = parse_tres_limits("CPU=64, mem=2G,GRES/gpu=8,gpu:H100=4").unwrap();
        let expected: BTreeMap<String, u64> =
            [("cpu", 64), ("mem", 2048), ("gres/gpu", 8), ("gres/gpu:h100", 4)].map(|(k, v)| (k.to_owned(), v)).into();
        assert_eq!(limits, expected);
        assert!(parse_tres_limits("licenses=3").unwrap_err().contains("unknown TRES"));
        assert!(parse_tres_limits("cpu").unwrap_err().contains("NAME=VALUE"));
        let weights = parse_tres_weights("CPU=1.0,Mem=0.25G,GRES/gpu:h100=8").unwrap();
        assert_eq!(weights.get("cpu"), 1.0);
        assert_eq!(weights.get("mem"), 0.25 / 1024.0);
        assert_eq!(weights.get("gres/gpu:h100"), 8.0);
        assert_eq!(weights.get("gres/gpu"), 0.0);
        assert!(parse_tres_weights("cpu=NaN").is_err());
    }

    #[test]
    fn priority_section_defaults_and_errors() {
        let p = RawPriority::default().validate().unwrap();
        assert_eq!(p, PriorityConfig::default());
        let raw =
            RawPriority { decay_half_life: Some("0".into()), max_age: Some("1-0".into()), ..RawPriority::default() };
        let p = raw.validate().unwrap();
        assert_eq!((p.decay_half_life, p.max_age), (0, 86400));
        let raw = RawPriority { fairshare: Some("fifo".into()), ..RawPriority::default() };
        assert_eq!(raw.validate().unwrap_err().0, "priority.fairshare");
    }
}
