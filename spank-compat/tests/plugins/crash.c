/* Dereferences NULL in the hook named by `crash=<hook>`; records the hooks it got through. */
#include <slurm/spank.h>
#include "record.h"

SPANK_PLUGIN(crasher, 1);

static int maybe_crash(const char *hook, int ac, char **av)
{
	char want[64];
	snprintf(want, sizeof(want), "crash=%s", hook);
	if (has_arg(ac, av, want)) {
		volatile int *nowhere = NULL;
		*nowhere = 1;
	}
	record(ac, av, "%s survived", hook);
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av) { (void) sp; return maybe_crash("init", ac, av); }
int slurm_spank_task_init(spank_t sp, int ac, char **av) { (void) sp; return maybe_crash("task_init", ac, av); }
int slurm_spank_exit(spank_t sp, int ac, char **av) { (void) sp; return maybe_crash("exit", ac, av); }
