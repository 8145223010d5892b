/* Records every hook it is called in: context, remote flag, real and effective uid. */
#include <slurm/spank.h>
#include <unistd.h>
#include "record.h"

SPANK_PLUGIN(order, 1);

static int note(const char *hook, spank_t sp, int ac, char **av)
{
	record(ac, av, "%s ctx=%d remote=%d uid=%d euid=%d", hook, (int) spank_context(), spank_remote(sp),
	       (int) getuid(), (int) geteuid());
	char want[64];
	snprintf(want, sizeof(want), "fail=%s", hook);
	return has_arg(ac, av, want) ? -1 : 0;
}

#define HOOK(h) int slurm_spank_##h(spank_t sp, int ac, char **av) { return note(#h, sp, ac, av); }
HOOK(init)
HOOK(job_prolog)
HOOK(init_post_opt)
HOOK(local_user_init)
HOOK(user_init)
HOOK(task_init_privileged)
HOOK(task_init)
HOOK(task_post_fork)
HOOK(task_exit)
HOOK(job_epilog)
HOOK(slurmd_exit)
HOOK(exit)
