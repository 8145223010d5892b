/* Asks for every item in the hooks named `at=<hook>` and records each answer. */
#include <slurm/spank.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include "record.h"

SPANK_PLUGIN(items, 1);

static void ask_all(const char *hook, spank_t sp, int ac, char **av)
{
	char want[64];
	snprintf(want, sizeof(want), "at=%s", hook);
	if (!has_arg(ac, av, want))
		return;
	uid_t uid = 0; gid_t gid = 0; uint32_t u32 = 0; uint16_t u16 = 0; uint64_t u64 = 0;
	int i = 0, argc = 0; pid_t pid = 0; char **argv = NULL, **env = NULL, *s = NULL;
	gid_t *gids = NULL; int n_gids = 0; spank_err_t rc;

#define ONE(item, ptr, fmt, val) \
	rc = spank_get_item(sp, item, ptr); \
	if (rc) record(ac, av, "%s %s rc=%d", hook, #item, rc); \
	else record(ac, av, "%s %s=" fmt, hook, #item, val);
	ONE(S_JOB_UID, &uid, "%u", (unsigned) uid)
	ONE(S_JOB_GID, &gid, "%u", (unsigned) gid)
	ONE(S_JOB_ID, &u32, "%u", u32)
	ONE(S_JOB_STEPID, &u32, "%#x", u32)
	ONE(S_JOB_NNODES, &u32, "%u", u32)
	ONE(S_JOB_NODEID, &u32, "%u", u32)
	ONE(S_JOB_LOCAL_TASK_COUNT, &u32, "%u", u32)
	ONE(S_JOB_TOTAL_TASK_COUNT, &u32, "%u", u32)
	ONE(S_JOB_NCPUS, &u16, "%u", (unsigned) u16)
	rc = spank_get_item(sp, S_JOB_ARGV, &argc, &argv);
	if (rc) record(ac, av, "%s S_JOB_ARGV rc=%d", hook, rc);
	else record(ac, av, "%s S_JOB_ARGV=%d:%s:%s", hook, argc, argc > 0 ? argv[0] : "", argv[argc] == NULL ? "null-ended" : "?");
	rc = spank_get_item(sp, S_JOB_ENV, &env);
	if (rc) record(ac, av, "%s S_JOB_ENV rc=%d", hook, rc);
	else {
		const char *found = "absent";
		for (char **e = env; e && *e; e++)
			if (strncmp(*e, "ITEMS_PROBE=", 12) == 0)
				found = *e;
		record(ac, av, "%s S_JOB_ENV=%s", hook, env == NULL ? "NULL" : found);
	}
	ONE(S_TASK_ID, &i, "%d", i)
	ONE(S_TASK_GLOBAL_ID, &u32, "%u", u32)
	ONE(S_TASK_EXIT_STATUS, &i, "%d", i)
	ONE(S_TASK_PID, &pid, "%s", pid > 0 ? "positive" : "zero")
	pid_t me = 0;
	spank_get_item(sp, S_TASK_PID, &me);
	rc = spank_get_item(sp, S_JOB_PID_TO_GLOBAL_ID, me, &u32);
	if (rc) record(ac, av, "%s S_JOB_PID_TO_GLOBAL_ID rc=%d", hook, rc);
	else record(ac, av, "%s S_JOB_PID_TO_GLOBAL_ID=%u", hook, u32);
	rc = spank_get_item(sp, S_JOB_PID_TO_LOCAL_ID, (pid_t) 999999, &u32);
	record(ac, av, "%s S_JOB_PID_TO_LOCAL_ID(unknown) rc=%d", hook, rc);
	rc = spank_get_item(sp, S_JOB_LOCAL_TO_GLOBAL_ID, (uint32_t) 1, &u32);
	if (rc) record(ac, av, "%s S_JOB_LOCAL_TO_GLOBAL_ID rc=%d", hook, rc);
	else record(ac, av, "%s S_JOB_LOCAL_TO_GLOBAL_ID(1)=%u", hook, u32);
	rc = spank_get_item(sp, S_JOB_GLOBAL_TO_LOCAL_ID, (uint32_t) 11, &u32);
	if (rc) record(ac, av, "%s S_JOB_GLOBAL_TO_LOCAL_ID rc=%d", hook, rc);
	else record(ac, av, "%s S_JOB_GLOBAL_TO_LOCAL_ID(11)=%u", hook, u32);
	rc = spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &gids, &n_gids);
	if (rc) record(ac, av, "%s S_JOB_SUPPLEMENTARY_GIDS rc=%d", hook, rc);
	else record(ac, av, "%s S_JOB_SUPPLEMENTARY_GIDS=%d:%u", hook, n_gids, n_gids > 0 ? (unsigned) gids[n_gids - 1] : 0);
	ONE(S_SLURM_VERSION, &s, "%s", s)
	ONE(S_SLURM_VERSION_MAJOR, &s, "%s", s)
	ONE(S_SLURM_VERSION_MINOR, &s, "%s", s)
	ONE(S_SLURM_VERSION_MICRO, &s, "%s", s)
	ONE(S_STEP_CPUS_PER_TASK, &u32, "%u", u32)
	ONE(S_JOB_ALLOC_CORES, &s, "%s", s)
	ONE(S_JOB_ALLOC_MEM, &u64, "%llu", (unsigned long long) u64)
	ONE(S_STEP_ALLOC_CORES, &s, "%s", s)
	ONE(S_STEP_ALLOC_MEM, &u64, "%llu", (unsigned long long) u64)
	ONE(S_SLURM_RESTART_COUNT, &u32, "%u", u32)
	ONE(S_JOB_ARRAY_ID, &u32, "%u", u32)
	ONE(S_JOB_ARRAY_TASK_ID, &u32, "%u", u32)
	rc = spank_get_item(sp, (spank_item_t) 77, &u32);
	record(ac, av, "%s unknown-item rc=%d", hook, rc);
	rc = spank_get_item(NULL, S_JOB_ID, &u32);
	record(ac, av, "%s bad-handle rc=%d", hook, rc);
#undef ONE
}

#define HOOK(h) int slurm_spank_##h(spank_t sp, int ac, char **av) { ask_all(#h, sp, ac, av); return 0; }
HOOK(init)
HOOK(init_post_opt)
HOOK(local_user_init)
HOOK(user_init)
HOOK(task_init_privileged)
HOOK(task_init)
HOOK(task_post_fork)
HOOK(task_exit)
HOOK(job_prolog)
HOOK(exit)
