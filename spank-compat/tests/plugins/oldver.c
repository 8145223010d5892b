/* Built "for" Slurm 21.08: the host must refuse it. */
#include <stdint.h>
const char plugin_name[] = "oldver";
const char plugin_type[] = "spank";
const unsigned int plugin_version = 0x150800;
int slurm_spank_init(void *sp, int ac, char **av) { (void) sp; (void) ac; (void) av; return 0; }
