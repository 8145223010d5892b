/* Needs a libslurm function no SPANK host provides: loading must fail and name it. */
#include <slurm/spank.h>

SPANK_PLUGIN(missing, 1);

extern int slurm_get_nonexistent_thing(void);

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void) sp; (void) ac; (void) av;
	return slurm_get_nonexistent_thing();
}
