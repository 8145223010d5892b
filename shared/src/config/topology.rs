//! The `[topology]` part of `cluster.toml`: the network's switches (or NVLink blocks) as a tree,
//! in the spirit of Slurm's `topology.conf` for its tree plugin. A leaf switch names its nodes, a
//! higher one the switches under it:
//!
//! ```toml
//! [[topology.switches]]
//! name = "s1"
//! nodes = "g[01-08]"
//! [[topology.switches]]
//! name = "s2"
//! nodes = "g[09-16]"
//! [[topology.switches]]
//! name = "spine"
//! switches = "s[1-2]"
//! ```
//!
//! A node belongs to at most one leaf switch and a switch to at most one parent; every name must
//! be declared. ctld places a multi-node job under the lowest switch whose nodes can hold it.

use crate::hostlist;
use serde::Deserialize;
use std::collections::HashMap;

/// The raw `[topology]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTopology {
    #[serde(default)]
    pub switches: Vec<RawSwitch>,
}

/// One raw `[[topology.switches]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSwitch {
    pub name: String,
    /// A leaf switch's nodes (a hostlist).
    pub nodes: Option<String>,
    /// A higher switch's switches (a hostlist of switch names).
    pub switches: Option<String>,
}

/// One validated switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switch {
    pub name: String,
    /// 0 for a leaf switch; one more than its highest child otherwise.
    pub level: u32,
    /// Every node under it, in node-table order.
    pub nodes: Vec<String>,
    /// The switches directly under it (empty for a leaf switch).
    pub children: Vec<String>,
}

/// The validated `[topology]`: switches by level (leaves first), then file order. Empty: no
/// topology (placement ignores switches).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    pub switches: Vec<Switch>,
}

/// The most switches a topology may declare.
pub const MAX_SWITCHES: usize = 65_536;
/// The longest switch name.
pub const MAX_NAME: usize = 64;

impl RawTopology {
    /// Checks the tree against the configured nodes (`nodes`, node-table order); an error is
    /// `(key, message)`.
    pub fn validate(self, nodes: &[&str]) -> Result<Topology, (String, String)> {
        if self.switches.len() > MAX_SWITCHES {
            return Err(("topology.switches".into(), format!("at most {MAX_SWITCHES} switches")));
        }
        let key = |i: usize, field: &str| format!("topology.switches[{i}].{field}");
        let position: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, switch) in self.switches.iter().enumerate() {
            let name = switch.name.as_str();
            let plain = name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if name.is_empty() || name.len() > MAX_NAME || !plain {
                let message = format!("a switch name is 1 to {MAX_NAME} letters, digits, `-`, `_` or `.`");
                return Err((key(i, "name"), message));
            }
            if let Some(first) = index.insert(name, i) {
                return Err((key(i, "name"), format!("switch `{name}` is declared twice (also switches[{first}])")));
            }
        }
        // Leaf nodes, children and parents.
        let mut leaf_of: HashMap<&str, &str> = HashMap::new();
        let mut parent_of: HashMap<String, &str> = HashMap::new();
        let mut members: Vec<Vec<String>> = Vec::with_capacity(self.switches.len());
        for (i, switch) in self.switches.iter().enumerate() {
            let name = switch.name.as_str();
            let (field, list) = match (&switch.nodes, &switch.switches) {
                (Some(list), None) => ("nodes", list),
                (None, Some(list)) => ("switches", list),
                _ => {
                    let message = format!("switch `{name}` needs exactly one of `nodes` (a leaf switch) or `switches`");
                    return Err((key(i, "name"), message));
                }
            };
            let names = hostlist::expand(list).map_err(|e| (key(i, field), e.to_string()))?;
            for member in &names {
                if field == "nodes" {
                    let Some((node, _)) = position.get_key_value(member.as_str()) else {
                        return Err((
                            key(i, field),
                            format!("switch `{name}` names node `{member}`, which is not configured"),
                        ));
                    };
                    if let Some(other) = leaf_of.insert(node, name)
                        && other != name
                    {
                        let message = format!(
                            "node `{member}` is in leaf switches `{other}` and `{name}`; a node belongs to one leaf switch"
                        );
                        return Err((key(i, field), message));
                    }
                } else {
                    if !index.contains_key(member.as_str()) {
                        return Err((
                            key(i, field),
                            format!("switch `{name}` names switch `{member}`, which is not declared"),
                        ));
                    }
                    if member == name {
                        return Err((key(i, field), format!("switch `{name}` names itself")));
                    }
                    if let Some(other) = parent_of.insert(member.clone(), name)
                        && other != name
                    {
                        let message =
                            format!("switch `{member}` is under both `{other}` and `{name}`; a switch has one parent");
                        return Err((key(i, field), message));
                    }
                }
            }
            members.push(names);
        }
        // Levels and the nodes under each switch, children first; a cycle leaves switches unresolved.
        let n = self.switches.len();
        let mut level: Vec<Option<u32>> = vec![None; n];
        let mut under: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut resolved = 0;
        while resolved < n {
            let before = resolved;
            for i in 0..n {
                if level[i].is_some() {
                    continue;
                }
                let switch = &self.switches[i];
                if switch.nodes.is_some() {
                    let mut nodes: Vec<usize> =
                        members[i].iter().filter_map(|m| position.get(m.as_str()).copied()).collect();
                    nodes.sort_unstable();
                    nodes.dedup();
                    under[i] = nodes;
                    level[i] = Some(0);
                    resolved += 1;
                    continue;
                }
                let children: Option<Vec<usize>> = members[i].iter().map(|m| index.get(m.as_str()).copied()).collect();
                let Some(children) = children else { continue };
                if children.iter().all(|c| level[*c].is_some()) {
                    let top = children.iter().filter_map(|c| level[*c]).max().unwrap_or(0);
                    let mut nodes: Vec<usize> = children.iter().flat_map(|c| under[*c].iter().copied()).collect();
                    nodes.sort_unstable();
                    nodes.dedup();
                    under[i] = nodes;
                    level[i] = Some(top + 1);
                    resolved += 1;
                }
            }
            if resolved == before {
                let stuck = (0..n).find(|i| level[*i].is_none()).unwrap_or(0);
                let name = &self.switches[stuck].name;
                return Err((key(stuck, "switches"), format!("switch `{name}` is in a cycle of switches")));
            }
        }
        let mut switches: Vec<Switch> = self
            .switches
            .iter()
            .enumerate()
            .map(|(i, s)| Switch {
                name: s.name.clone(),
                level: level[i].unwrap_or(0),
                nodes: under[i].iter().map(|&k| nodes[k].to_owned()).collect(),
                children: if s.nodes.is_some() { Vec::new() } else { members[i].clone() },
            })
            .collect();
        switches.sort_by_key(|s| s.level);
        Ok(Topology { switches })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<Vec<(String, u32, Vec<String>)>, String> {
        #[derive(Deserialize)]
        struct File {
            topology: RawTopology,
        }
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let nodes = ["g01", "g02", "g03", "g04"];
        let topology = file.topology.validate(&nodes).map_err(|(key, message)| format!("{key}: {message}"))?;
        Ok(topology.switches.into_iter().map(|s| (s.name, s.level, s.nodes)).collect())
    }

    #[test]
    fn a_tree_of_switches() {
        let tree = check(
            "[[topology.switches]]\nname = \"top\"\nswitches = \"s[1-2]\"\n\
             [[topology.switches]]\nname = \"s1\"\nnodes = \"g[01-02]\"\n\
             [[topology.switches]]\nname = \"s2\"\nnodes = \"g[03-04]\"\n",
        )
        .unwrap();
        let names: Vec<(&str, u32, usize)> = tree.iter().map(|(n, l, nodes)| (n.as_str(), *l, nodes.len())).collect();
        assert_eq!(names, [("s1", 0, 2), ("s2", 0, 2), ("top", 1, 4)]);
    }

    #[test]
    fn bad_trees_are_refused_with_the_reason() {
        let leaf = |name: &str, nodes: &str| format!("[[topology.switches]]\nname = \"{name}\"\nnodes = \"{nodes}\"\n");
        let cases = [
            (leaf("s1", "g[01-02],x9"), "switch `s1` names node `x9`, which is not configured"),
            (leaf("s1", "g[01-02]") + &leaf("s2", "g[02-03]"), "node `g02` is in leaf switches `s1` and `s2`"),
            (leaf("s1", "g01") + &leaf("s1", "g02"), "switch `s1` is declared twice"),
            ("[[topology.switches]]\nname = \"t\"\nswitches = \"s9\"\n".to_owned(), "names switch `s9`, which is not declared"),
            ("[[topology.switches]]\nname = \"t\"\n".to_owned(), "needs exactly one of `nodes`"),
            (
                "[[topology.switches]]\nname = \"a\"\nswitches = \"b\"\n[[topology.switches]]\nname = \"b\"\nswitches = \"a\"\n"
                    .to_owned(),
                "is in a cycle of switches",
            ),
            (
                leaf("s1", "g01")
                    + "[[topology.switches]]\nname = \"a\"\nswitches = \"s1\"\n[[topology.switches]]\nname = \"b\"\nswitches = \"s1\"\n",
                "switch `s1` is under both `a` and `b`",
            ),
            (leaf("bad name", "g01"), "a switch name is 1 to 64"),
        ];
        for (text, expected) in cases {
            let error = check(&text).unwrap_err();
            assert!(error.contains(expected), "{error}\n--- for ---\n{text}");
        }
    }
}
