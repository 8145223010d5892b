//! Policy: the decisions ctld makes over the model, without I/O. The scheduling pass
//! ([`scheduler`], with [`backfill`], [`preempt`] and [`quota`]), multifactor priority
//! ([`priority`], [`fairshare`]), limits, dependencies, job arrays, team job templates ([`template`]), when a node's failures drain it ([`incident`]), submit-time validation, who
//! may do what ([`authz`]), `drover why` ([`explain`]), `sbatch --test-only` ([`will_run`]) and the what-if replay of
//! recorded jobs under a config ([`sim`]).
//! It imports the model only: never the store, the core or serve.

pub(crate) mod array;
pub(crate) mod authz;
pub(crate) mod backfill;
pub(crate) mod dependency;
pub(crate) mod explain;
pub(crate) mod fairshare;
pub(crate) mod incident;
pub(crate) mod limits;
#[doc(hidden)]
pub mod passbench;
pub(crate) mod placement;
pub(crate) mod preempt;
pub(crate) mod priority;
pub(crate) mod quota;
pub(crate) mod report;
pub(crate) mod scheduler;
pub(crate) mod sim;
pub(crate) mod spare;
pub(crate) mod template;
pub(crate) mod topology;
pub(crate) mod validate;
pub(crate) mod will_run;
