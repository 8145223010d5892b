//! Decayed usage per user association, the input of fair share. Each core tick advances it
//! incrementally: every value decays by `D^Δt` with `D = 1 − ln 2 / half-life`, then each running
//! job adds `Δt · D^Δt · billing` to its association. Nothing rescans job history; the values are
//! stored in the database (table `usage`) so a restarted ctld continues where it stopped.

use drover_shared::UnixTime;
use std::collections::BTreeMap;

/// Seconds between two saves of the usage table.
pub(crate) const SAVE_EVERY: i64 = 30;

/// `(account, user)` → decayed billing-seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Usage {
    pub(crate) by_assoc: BTreeMap<(String, String), f64>,
    /// When the values were last advanced.
    pub(crate) updated: UnixTime,
    pub(crate) saved: UnixTime,
}

/// The per-second decay factor for a half-life in seconds (0 = no decay).
pub(crate) fn decay_factor(half_life: u64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    if half_life == 0 { 1.0 } else { 1.0 - 0.693 / half_life as f64 }
}

impl Usage {
    /// Empty usage with an association for every user the config lists, in each of its accounts.
    pub(crate) fn seeded(config: &drover_shared::config::Config) -> Usage {
        let mut usage = Usage::default();
        for user in &config.users {
            for account in &user.accounts {
                usage.touch(account, &user.name);
            }
        }
        usage
    }

    /// Makes sure an association exists (so `sshare` lists a user before their first job ends).
    pub(crate) fn touch(&mut self, account: &str, user: &str) {
        self.by_assoc.entry((account.to_owned(), user.to_owned())).or_insert(0.0);
    }

    /// Decays everything to `now` and charges the running jobs (`(account, user, billing)`).
    pub(crate) fn advance<'a>(
        &mut self,
        now: UnixTime,
        half_life: u64,
        running: impl IntoIterator<Item = (&'a str, &'a str, f64)>,
    ) {
        if self.updated == 0 {
            self.updated = now;
        }
        let delta = now - self.updated;
        if delta <= 0 {
            return;
        }
        #[allow(clippy::cast_precision_loss)]
        let delta_f = delta as f64;
        let decay = decay_factor(half_life).powf(delta_f);
        for value in self.by_assoc.values_mut() {
            *value *= decay;
        }
        for (account, user, billing) in running {
            *self.by_assoc.entry((account.to_owned(), user.to_owned())).or_insert(0.0) += delta_f * decay * billing;
        }
        self.updated = now;
    }

    /// Whether the table is due for a save.
    pub(crate) fn save_due(&self, now: UnixTime) -> bool {
        now - self.saved >= SAVE_EVERY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Data-driven: (half-life s, Δt s, start usage, billing of one running job, expected usage).
    #[test]
    fn decay_and_charge() {
        let cases: &[(u64, i64, f64, f64, f64)] = &[
            // No decay: 60 s × billing 10 = 600.
            (0, 60, 0.0, 10.0, 600.0),
            // One half-life without jobs: (1 − 0.693/3600)^3600 = 0.50004024.
            (3600, 3600, 1000.0, 0.0, 500.04024),
            // Ten seconds at a one-day half-life: decay 0.999920 → 100 × d + 10 × d × 5 = 149.988.
            (86400, 10, 100.0, 5.0, 149.988),
        ];
        for &(half_life, delta, start, billing, expected) in cases {
            let mut usage = Usage::default();
            usage.by_assoc.insert(("a".into(), "u".into()), start);
            usage.updated = 1000;
            usage.advance(1000 + delta, half_life, [("a", "u", billing)].into_iter().filter(|r| r.2 > 0.0));
            let got = usage.by_assoc[&("a".to_owned(), "u".to_owned())];
            assert!((got - expected).abs() < 1e-3, "half-life {half_life}, Δt {delta}: {got} != {expected}");
        }
    }
}
