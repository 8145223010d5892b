//! Fair share over the association tree: Fair Tree (Slurm's default) and the classic algorithm,
//! as pure functions of the tree's shares and decayed usage. Account usage is the sum of the user
//! associations below it, which equals charging every ancestor because decay is linear.

use drover_shared::config::AccountConfig;
use std::collections::BTreeMap;

/// One association: an account, or a user in an account.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Assoc {
    pub(crate) account: String,
    pub(crate) user: Option<String>,
    pub(crate) parent: Option<usize>,
    pub(crate) depth: u32,
    pub(crate) shares: u32,
    /// Decayed billing-seconds (for accounts: the sum below).
    pub(crate) usage: f64,
    /// Users first, then accounts, each by name: the order `sshare` prints.
    pub(crate) children: Vec<usize>,
}

/// The association tree; index 0 is root.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tree {
    pub(crate) assocs: Vec<Assoc>,
}

/// What fair share computes for one association.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Shares {
    pub(crate) norm_shares: f64,
    pub(crate) norm_usage: f64,
    pub(crate) effective_usage: f64,
    /// Fair Tree's level fair share; `None` for root and in classic mode.
    pub(crate) level_fs: Option<f64>,
    /// The fair-share factor; Fair Tree gives it to users only.
    pub(crate) fairshare: Option<f64>,
}

impl Tree {
    /// Builds the tree from the accounts (root first), the user associations and their usage.
    /// `shares` gives a user association's shares (its `Fairshare`, 1 unless set).
    pub(crate) fn build(
        accounts: &[AccountConfig],
        users: &BTreeMap<(String, String), f64>,
        shares: impl Fn(&str, &str) -> u32,
    ) -> Tree {
        let mut assocs: Vec<Assoc> = Vec::new();
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        for account in accounts {
            index.insert(&account.name, assocs.len());
            assocs.push(Assoc {
                account: account.name.clone(),
                user: None,
                parent: None,
                depth: 0,
                shares: account.shares,
                usage: 0.0,
                children: Vec::new(),
            });
        }
        for (i, account) in accounts.iter().enumerate() {
            assocs[i].parent = account.parent.as_deref().and_then(|p| index.get(p).copied());
        }
        for ((account, user), usage) in users {
            let Some(&parent) = index.get(account.as_str()) else { continue };
            assocs.push(Assoc {
                account: account.clone(),
                user: Some(user.clone()),
                parent: Some(parent),
                depth: 0,
                shares: shares(account, user),
                usage: *usage,
                children: Vec::new(),
            });
        }
        for i in 0..assocs.len() {
            if let Some(parent) = assocs[i].parent {
                assocs[parent].children.push(i);
            }
        }
        for i in 0..assocs.len() {
            let mut children = std::mem::take(&mut assocs[i].children);
            children.sort_by(|&a, &b| {
                let key = |x: usize| {
                    (assocs[x].user.is_none(), assocs[x].user.clone().unwrap_or_else(|| assocs[x].account.clone()))
                };
                key(a).cmp(&key(b))
            });
            assocs[i].children = children;
        }
        let mut tree = Tree { assocs };
        tree.settle(0, 0);
        tree
    }

    /// Sets depths and sums usage up the tree.
    fn settle(&mut self, i: usize, depth: u32) -> f64 {
        self.assocs[i].depth = depth;
        if self.assocs[i].user.is_some() {
            return self.assocs[i].usage;
        }
        let children = self.assocs[i].children.clone();
        let sum: f64 = children.iter().map(|&c| self.settle(c, depth + 1)).sum();
        self.assocs[i].usage = sum;
        sum
    }

    /// Nodes in `sshare` order (pre-order).
    pub(crate) fn preorder(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut stack = vec![0];
        while let Some(i) = stack.pop() {
            out.push(i);
            stack.extend(self.assocs[i].children.iter().rev());
        }
        out
    }

    /// The user association of `user` in `account`.
    #[cfg(test)]
    pub(crate) fn find_user(&self, account: &str, user: &str) -> Option<usize> {
        self.assocs.iter().position(|a| a.account == account && a.user.as_deref() == Some(user))
    }

    fn sibling_share(&self, i: usize) -> f64 {
        let Some(parent) = self.assocs[i].parent else { return 0.0 };
        let total: u32 = self.assocs[parent].children.iter().map(|&c| self.assocs[c].shares).sum();
        if total == 0 { 0.0 } else { f64::from(self.assocs[i].shares) / f64::from(total) }
    }

    fn norm_shares(&self, i: usize) -> f64 {
        match self.assocs[i].parent {
            None => 0.0,
            Some(_) => self.sibling_share(i),
        }
    }

    fn norm_usage(&self, i: usize) -> f64 {
        let root = self.assocs[0].usage;
        if root > 0.0 { (self.assocs[i].usage / root).min(1.0) } else { 0.0 }
    }
}

/// Fair Tree: level fair share per sibling set, then a depth-first ranking of users.
pub(crate) fn fair_tree(tree: &Tree) -> Vec<Shares> {
    let n = tree.assocs.len();
    let mut out = vec![Shares::default(); n];
    out[0].effective_usage = 1.0;
    for (i, slot) in out.iter_mut().enumerate().skip(1) {
        let parent_usage = tree.assocs[tree.assocs[i].parent.unwrap_or(0)].usage;
        let s = tree.norm_shares(i);
        let u = if parent_usage > 0.0 { tree.assocs[i].usage / parent_usage } else { 0.0 };
        let level_fs = if s == 0.0 {
            0.0
        } else if u == 0.0 {
            f64::INFINITY
        } else {
            s / u
        };
        *slot = Shares {
            norm_shares: s,
            norm_usage: tree.norm_usage(i),
            effective_usage: u,
            level_fs: Some(level_fs),
            fairshare: None,
        };
    }
    #[allow(clippy::cast_precision_loss)]
    let n_users = tree.assocs.iter().filter(|a| a.user.is_some()).count() as f64;
    let mut ranker = Ranker { tree, out: &mut out, n_users, rank: n_users, rank_no_ties: n_users };
    ranker.visit(0, false);
    out
}

struct Ranker<'a> {
    tree: &'a Tree,
    out: &'a mut Vec<Shares>,
    n_users: f64,
    rank: f64,
    rank_no_ties: f64,
}

impl Ranker<'_> {
    fn visit(&mut self, node: usize, carried_tie: bool) {
        let mut children = self.tree.assocs[node].children.clone();
        let lf = |i: usize, out: &Vec<Shares>| out[i].level_fs.unwrap_or(0.0);
        // Stable sort: higher level fair share first; on ties users before accounts, then name.
        children.sort_by(|&a, &b| {
            lf(b, self.out)
                .partial_cmp(&lf(a, self.out))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(self.tree.assocs[a].user.is_none().cmp(&self.tree.assocs[b].user.is_none()))
        });
        let mut previous: Option<f64> = None;
        for (k, &child) in children.iter().enumerate() {
            let level_fs = lf(child, self.out);
            let tied = if k == 0 { carried_tie } else { previous == Some(level_fs) };
            if self.tree.assocs[child].user.is_some() {
                if !tied {
                    self.rank = self.rank_no_ties;
                }
                self.out[child].fairshare = Some(if self.n_users > 0.0 { self.rank / self.n_users } else { 0.0 });
                self.rank_no_ties -= 1.0;
            } else {
                self.visit(child, tied);
            }
            previous = Some(level_fs);
        }
    }
}

/// Classic fair share: `F = 2^(-EffectvUsage / NormShares)` with shares multiplied down the tree.
pub(crate) fn classic(tree: &Tree) -> Vec<Shares> {
    let n = tree.assocs.len();
    let mut out = vec![Shares::default(); n];
    out[0] = Shares { norm_shares: 1.0, norm_usage: 1.0, effective_usage: 1.0, level_fs: None, fairshare: Some(1.0) };
    for i in tree.preorder().into_iter().skip(1) {
        let parent = tree.assocs[i].parent.unwrap_or(0);
        let norm_shares = out[parent].norm_shares * tree.sibling_share(i);
        let norm_usage = tree.norm_usage(i);
        let effective_usage = if parent == 0 {
            norm_usage
        } else {
            norm_usage + (out[parent].effective_usage - norm_usage) * tree.sibling_share(i)
        };
        let fairshare = if norm_shares > 0.0 { 2f64.powf(-effective_usage / norm_shares) } else { 0.0 };
        out[i] = Shares { norm_shares, norm_usage, effective_usage, level_fs: None, fairshare: Some(fairshare) };
    }
    out[0].norm_shares = 0.0;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(name: &str, parent: Option<&str>, shares: u32) -> AccountConfig {
        AccountConfig { shares, ..AccountConfig::new(name, parent) }
    }

    fn tree(accounts: &[(&str, Option<&str>, u32)], users: &[(&str, &str, f64)]) -> Tree {
        let accounts: Vec<_> = accounts.iter().map(|(n, p, s)| account(n, *p, *s)).collect();
        let users = users.iter().map(|(a, u, usage)| ((a.to_string(), u.to_string()), *usage)).collect();
        Tree::build(&accounts, &users, |_, _| 1)
    }

    fn table(tree: &Tree, shares: &[Shares]) -> String {
        let mut out = String::new();
        for i in tree.preorder() {
            let a = &tree.assocs[i];
            let s = shares[i];
            let fmt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.6}"));
            out += &format!(
                "{}{}{} ns={:.6} u={} eu={:.6} lf={} fs={}\n",
                " ".repeat(a.depth as usize),
                a.account,
                a.user.as_deref().map_or(String::new(), |u| format!("/{u}")),
                s.norm_shares,
                a.usage,
                s.effective_usage,
                fmt(s.level_fs),
                fmt(s.fairshare)
            );
        }
        out
    }

    /// The baseline sample: no usage, every user ties at rank Nu → 1.0; NormShares 60/101 etc.
    #[test]
    fn fair_tree_without_usage_matches_the_sshare_sample() {
        let t = tree(
            &[("root", None, 1), ("teama", Some("root"), 60), ("teamb", Some("root"), 40)],
            &[("root", "root", 0.0), ("teama", "root", 0.0), ("teamb", "nobody", 0.0), ("teamb", "root", 0.0)],
        );
        expect_test::expect![[r#"
            root ns=0.000000 u=0 eu=1.000000 lf=- fs=-
             root/root ns=0.009901 u=0 eu=0.000000 lf=inf fs=1.000000
             teama ns=0.594059 u=0 eu=0.000000 lf=inf fs=-
              teama/root ns=1.000000 u=0 eu=0.000000 lf=inf fs=1.000000
             teamb ns=0.396040 u=0 eu=0.000000 lf=inf fs=-
              teamb/nobody ns=0.500000 u=0 eu=0.000000 lf=inf fs=1.000000
              teamb/root ns=0.500000 u=0 eu=0.000000 lf=inf fs=1.000000
        "#]]
        .assert_eq(&table(&t, &fair_tree(&t)));
    }

    /// Hand-computed: A (60 shares) used 30, B (40) used 70 → LF(A) = 0.6/0.3 = 2, LF(B) = 0.4/0.7.
    /// Nu = 3. a1 ranks first (3/3); in B, b2 has no usage (LF ∞) → 2/3; b1 (LF 0.5/1) → 1/3.
    #[test]
    fn fair_tree_ranks_accounts_then_users() {
        let t = tree(
            &[("root", None, 1), ("a", Some("root"), 60), ("b", Some("root"), 40)],
            &[("a", "a1", 30.0), ("b", "b1", 70.0), ("b", "b2", 0.0)],
        );
        expect_test::expect![[r#"
            root ns=0.000000 u=100 eu=1.000000 lf=- fs=-
             a ns=0.600000 u=30 eu=0.300000 lf=2.000000 fs=-
              a/a1 ns=1.000000 u=30 eu=1.000000 lf=1.000000 fs=1.000000
             b ns=0.400000 u=70 eu=0.700000 lf=0.571429 fs=-
              b/b1 ns=0.500000 u=70 eu=1.000000 lf=0.500000 fs=0.333333
              b/b2 ns=0.500000 u=0 eu=0.000000 lf=inf fs=0.666667
        "#]]
        .assert_eq(&table(&t, &fair_tree(&t)));
    }

    /// Two equal users tie with each other and share a rank; the next user gets rank_no_ties.
    #[test]
    fn fair_tree_ties_share_a_rank() {
        let t = tree(
            &[("root", None, 1), ("a", Some("root"), 1)],
            &[("a", "u1", 10.0), ("a", "u2", 10.0), ("a", "u3", 40.0)],
        );
        let shares = fair_tree(&t);
        let fs = |u: &str| shares[t.find_user("a", u).unwrap()].fairshare.unwrap();
        assert_eq!((fs("u1"), fs("u2"), fs("u3")), (1.0, 1.0, 1.0 / 3.0));
    }

    /// Reference §8.2 example: user 1 of 2 in C(10) under A(40); A,D = 40,60; B,C = 30,10 →
    /// NormShares 0.4 × 0.25 × 0.5 = 0.05. With no usage the factor is 2^0 = 1; with the user
    /// holding all usage: EffectvUsage(A) = 1, C = 1, user = 1 → F = 2^(-1/0.05) ≈ 9.5e-7.
    #[test]
    fn classic_norm_shares_and_factor() {
        let accounts = [
            ("root", None, 1),
            ("a", Some("root"), 40),
            ("d", Some("root"), 60),
            ("b", Some("a"), 30),
            ("c", Some("a"), 10),
        ];
        let t = tree(&accounts, &[("c", "u1", 0.0), ("c", "u2", 0.0)]);
        let shares = classic(&t);
        let u1 = t.find_user("c", "u1").unwrap();
        assert!((shares[u1].norm_shares - 0.05).abs() < 1e-12);
        assert_eq!(shares[u1].fairshare, Some(1.0));
        let t = tree(&accounts, &[("c", "u1", 100.0), ("c", "u2", 0.0)]);
        let shares = classic(&t);
        assert!((shares[u1].effective_usage - 1.0).abs() < 1e-12);
        assert!((shares[u1].fairshare.unwrap() - 2f64.powf(-20.0)).abs() < 1e-15);
        // u2: UA = 0, parent C's UE = 1, S = 1/2 → UE = 0.5; F = 2^(-0.5/0.05) = 2^-10.
        let u2 = t.find_user("c", "u2").unwrap();
        assert!((shares[u2].fairshare.unwrap() - 2f64.powf(-10.0)).abs() < 1e-15);
    }
}
