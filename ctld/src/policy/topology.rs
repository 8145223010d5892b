//! Topology-aware placement of multi-node jobs (`[[topology.switches]]`), after Slurm's tree
//! plugin: a job that needs more than one node goes under the lowest switch whose nodes can hold
//! it (a leaf switch when one can), and among the switches of that level under the one with the
//! fewest of the job's candidate nodes (best fit: the emptier switches stay whole for wider
//! jobs); within the switch, nodes are taken in the pass's best-fit order. When no switch can hold
//! it (say, nodes outside every switch are needed), it is placed on the partition as without a
//! topology. Single-node jobs are placed as before. Backfill reservations are planned without the
//! topology.

use crate::model::state::State;
use crate::policy::placement::Placement;

/// The switch tree over the node table, for one pass: each switch's nodes as node indexes, lowest
/// level first.
pub(crate) struct Tree {
    /// (level, node index → under this switch).
    switches: Vec<(u32, Vec<bool>)>,
}

impl Tree {
    /// The configured tree, or `None` without one.
    pub(crate) fn of(state: &State) -> Option<Tree> {
        let topology = &state.config().topology;
        if topology.switches.is_empty() {
            return None;
        }
        let switches = topology
            .switches
            .iter()
            .map(|switch| {
                let mut under = vec![false; state.nodes().len()];
                for node in &switch.nodes {
                    if let Some(&i) = state.node_index().get(node) {
                        under[i] = true;
                    }
                }
                (switch.level, under)
            })
            .collect();
        Some(Tree { switches })
    }

    /// Places a job of `wanted` nodes on `nodes` (node indexes, best-fit order) with `place`
    /// (the pass's placement on the nodes it is given), under the lowest switch that can hold
    /// it; see the module's text. A single-node job goes straight to `place`.
    pub(crate) fn place(&self, wanted: u32, nodes: Vec<usize>, place: impl Fn(Vec<usize>) -> Placement) -> Placement {
        let wanted = wanted as usize;
        if wanted > 1 {
            let mut level_start = 0;
            while level_start < self.switches.len() {
                let level = self.switches[level_start].0;
                let level_end = self.switches[level_start..]
                    .iter()
                    .position(|(l, _)| *l != level)
                    .map_or(self.switches.len(), |k| level_start + k);
                // The switches of this level with enough candidate nodes, fewest first.
                let mut fitting: Vec<Vec<usize>> = self.switches[level_start..level_end]
                    .iter()
                    .map(|(_, under)| nodes.iter().copied().filter(|&i| under[i]).collect::<Vec<usize>>())
                    .filter(|subset| subset.len() >= wanted)
                    .collect();
                fitting.sort_by_key(Vec::len);
                for subset in fitting {
                    if let Placement::Placed(alloc) = place(subset) {
                        return Placement::Placed(alloc);
                    }
                }
                level_start = level_end;
            }
        }
        place(nodes)
    }
}
