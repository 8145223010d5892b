//! Host for existing SPANK plugins: C shared objects built against Slurm's `<slurm/spank.h>`.
//!
//! Nothing is implemented yet. The SPANK issue fills this crate with the plugin stack parser, the
//! `dlopen` loader and the exported `spank_*` ABI (with a small C shim for the variadic calls).
