//! The options of sbatch, srun and salloc, defined once and read the same way by all three.
//!
//! Every option is a row of the table in [`defs`] (its names, the commands that accept it, its
//! `SBATCH_*` variable, its help line and the function that checks and stores its value). A
//! command line is scanned by the getopt_long scanner in [`getopt`] over the command's own rows
//! and read into a [`layers::Layer`] of "low" arguments ([`lowargs::LowArgs`]); `--help`,
//! `--usage` and `--version` are printed from the same rows ([`help`]); the `--export` grammar
//! all three check is in [`export`]. What happens to the arguments next is each command's
//! business: sbatch adds its environment and `#SBATCH` layers and builds a job
//! ([`crate::sbatch`]), srun and salloc build a step or an allocation ([`crate::srun::options`]).

pub(crate) mod defs;
pub(crate) mod export;
pub(crate) mod getopt;
pub(crate) mod help;
pub(crate) mod layers;
pub(crate) mod lowargs;
