//! The nodes a job's own request allows (`-w`, `-x`, `--constraint`), resolved once at submit
//! into node indexes (`policy::validate::node_filter`), so that a scheduling pass asks a set of
//! ranges and never reads the request's text again. Resolved again after a reconfigure, which may
//! renumber the node table.

/// A set of node indexes as sorted, disjoint, inclusive ranges: a list naming nodes that are
/// neighbours in the node table (`n[1-4096]`) holds one range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeSet {
    ranges: Vec<(u32, u32)>,
}

impl NodeSet {
    /// The set of `indexes` (any order, duplicates allowed).
    pub(crate) fn from_indexes(mut indexes: Vec<u32>) -> NodeSet {
        indexes.sort_unstable();
        indexes.dedup();
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for i in indexes {
            match ranges.last_mut() {
                Some((_, hi)) if hi.checked_add(1) == Some(i) => *hi = i,
                _ => ranges.push((i, i)),
            }
        }
        ranges.shrink_to_fit();
        NodeSet { ranges }
    }

    pub(crate) fn contains(&self, index: usize) -> bool {
        let Ok(index) = u32::try_from(index) else { return false };
        let at = self.ranges.partition_point(|&(_, hi)| hi < index);
        self.ranges.get(at).is_some_and(|&(lo, _)| lo <= index)
    }
}

/// What a job's request allows of the node table; `None` parts allow every node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeFilter {
    /// `-w/--nodelist`: only these.
    pub(crate) required: Option<NodeSet>,
    /// `-x/--exclude`: never these.
    pub(crate) excluded: NodeSet,
    /// `--constraint`: the nodes whose features match it.
    pub(crate) features: Option<NodeSet>,
}

impl NodeFilter {
    /// Whether node `index` may run the job.
    pub(crate) fn allows(&self, index: usize) -> bool {
        !self.excluded.contains(index)
            && self.required.as_ref().is_none_or(|set| set.contains(index))
            && self.features.as_ref().is_none_or(|set| set.contains(index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_hold_ranges_and_answer_membership() {
        let set = NodeSet::from_indexes(vec![7, 1, 2, 3, 3, 9, 8]);
        assert_eq!(set.ranges, [(1, 3), (7, 9)]);
        let members: Vec<usize> = (0..12).filter(|&i| set.contains(i)).collect();
        assert_eq!(members, [1, 2, 3, 7, 8, 9]);
        assert!(!NodeSet::default().contains(0));
        let filter = NodeFilter { required: Some(set), excluded: NodeSet::from_indexes(vec![2]), features: None };
        let allowed: Vec<usize> = (0..12).filter(|&i| filter.allows(i)).collect();
        assert_eq!(allowed, [1, 3, 7, 8, 9]);
    }
}
