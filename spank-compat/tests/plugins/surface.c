/*
 * The SPANK surface pyxis uses, called from the callbacks pyxis calls it from, with every answer
 * appended as one line to the file named by the `out=<path>` argument (record.h); the tests
 * (spank-compat/tests/plugins.rs, tests/tests/spank.rs) check the lines.
 *
 * - init, every context: spank_context(); outside slurmd and job_script the option
 *   --surface-image=<name> is registered with spank_option_register (pyxis registers its
 *   options so); outside the remote context spank_getenv/setenv/unsetenv must answer
 *   ESPANK_NOT_REMOTE (pyxis then falls back to getenv(3)).
 * - init_post_opt: local/allocator: the option's value; remote: S_JOB_UID, S_JOB_GID,
 *   S_JOB_SUPPLEMENTARY_GIDS, S_JOB_ID, S_JOB_STEPID, S_JOB_LOCAL_TASK_COUNT,
 *   S_JOB_TOTAL_TASK_COUNT and spank_getenv("PWD"), spank_getenv("SURFACE_MARK").
 * - user_init (remote): S_JOB_ENV, S_JOB_ARGV (for the batch step argv[0] is the script), the
 *   effective uid.
 * - task_init (remote, in the task): S_JOB_ENV again (the task's own: SLURM_PROCID),
 *   S_TASK_GLOBAL_ID, spank_unsetenv of LANG, LANGUAGE, LC_ALL, spank_setenv with and without
 *   overwrite (ESPANK_ENV_EXISTS), slurm_spank_log.
 * - task_exit: S_TASK_EXIT_STATUS, S_JOB_LOCAL_TASK_COUNT.
 * - job_prolog, job_epilog (job_script context): S_JOB_UID, S_JOB_GID, S_JOB_ID,
 *   spank_option_getopt of the job's --surface-image, the effective uid; the epilog also
 *   fixes up the process environment with setenv(3)/unsetenv(3) as pyxis does.
 * - exit (every context but slurmd), slurmd_exit (slurmd).
 * The argument `fail=slurmd_init`, `fail=job_prolog` or `fail=job_epilog` makes that hook fail
 * with an error line.
 */
#include <slurm/spank.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "record.h"

SPANK_PLUGIN(surface, 1);

#define BATCH_STEP 0xfffffffbu

static char image[128] = "none";

static int image_cb(int val, const char *optarg, int remote)
{
	(void) val;
	if (optarg == NULL)
		return -1;
	snprintf(image, sizeof(image), "%s%s", optarg, remote ? "(remote)" : "");
	return 0;
}

static struct spank_option image_option = {
	"surface-image", "name", "An image name the surface test plugin records", 1, 0, image_cb
};

/* The value of NAME in a NULL-terminated NAME=value array, or "-". */
static const char *env_value(char **env, const char *name)
{
	size_t len = strlen(name);
	for (int i = 0; env != NULL && env[i] != NULL; i++)
		if (strncmp(env[i], name, len) == 0 && env[i][len] == '=')
			return env[i] + len + 1;
	return "-";
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	int reg = -1;
	if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR || ctx == S_CTX_REMOTE)
		reg = spank_option_register(sp, &image_option);
	if (ctx == S_CTX_REMOTE) {
		record(ac, av, "init ctx=%d register=%d euid=%d", (int) ctx, reg, (int) geteuid());
		return 0;
	}
	if (ctx == S_CTX_SLURMD && has_arg(ac, av, "fail=slurmd_init")) {
		slurm_error("surface: slurmd init fails on purpose");
		return -1;
	}
	char buf[64];
	int get = spank_getenv(sp, "PATH", buf, sizeof(buf));
	int set = spank_setenv(sp, "SURFACE_X", "1", 1);
	int unset = spank_unsetenv(sp, "SURFACE_X");
	record(ac, av, "init ctx=%d register=%d getenv=%d setenv=%d unsetenv=%d euid=%d", (int) ctx, reg, get, set,
	       unset, (int) geteuid());
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	if (ctx != S_CTX_REMOTE) {
		record(ac, av, "init_post_opt ctx=%d image=%s", (int) ctx, image);
		return 0;
	}
	uid_t uid = 0;
	gid_t gid = 0;
	gid_t *gids = NULL;
	int ngids = 0;
	uint32_t job = 0, step = 0, local = 0, total = 0;
	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &gids, &ngids) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &total) != ESPANK_SUCCESS) {
		slurm_error("surface: an item of init_post_opt is missing");
		return -1;
	}
	char gid_list[256] = "";
	for (int i = 0; i < ngids && strlen(gid_list) < sizeof(gid_list) - 16; i++)
		snprintf(gid_list + strlen(gid_list), sizeof(gid_list) - strlen(gid_list), "%s%u", i ? "," : "",
			 (unsigned) gids[i]);
	char pwd[256] = "-", mark[64] = "-";
	int pwd_rc = spank_getenv(sp, "PWD", pwd, sizeof(pwd));
	spank_getenv(sp, "SURFACE_MARK", mark, sizeof(mark));
	record(ac, av, "init_post_opt ctx=2 job=%u step=%u uid=%u gid=%u gids=%s local=%u total=%u pwd_rc=%d pwd=%s mark=%s image=%s",
	       job, step, (unsigned) uid, (unsigned) gid, gid_list, local, total, pwd_rc, pwd, mark, image);
	return 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	char **env = NULL;
	int argc = 0;
	char **argv = NULL;
	uint32_t job = 0, step = 0;
	if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS) {
		slurm_error("surface: an item of user_init is missing");
		return -1;
	}
	char args[256] = "";
	for (int i = 0; i < argc && strlen(args) < sizeof(args) - 64; i++)
		snprintf(args + strlen(args), sizeof(args) - strlen(args), "%s%.60s", i ? "|" : "", argv[i]);
	record(ac, av, "user_init job=%u step=%s%u argc=%d argv=%s mark=%s euid=%d", job, step == BATCH_STEP ? "batch:" : "",
	       step, argc, args, env_value(env, "SURFACE_MARK"), (int) geteuid());
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	char **env = NULL;
	uint32_t job = 0, rank = 0;
	if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_TASK_GLOBAL_ID, &rank) != ESPANK_SUCCESS) {
		slurm_error("surface: an item of task_init is missing");
		return -1;
	}
	char procid[16];
	snprintf(procid, sizeof(procid), "%s", env_value(env, "SLURM_PROCID"));
	/* pyxis's order: drop the locale variables, then import the container's environment. */
	static const char *deny[] = { "LANG", "LANGUAGE", "LC_ALL", NULL };
	int unset = 0;
	for (int i = 0; deny[i] != NULL; i++)
		unset |= spank_unsetenv(sp, deny[i]);
	int set = spank_setenv(sp, "SURFACE_FROM_PLUGIN", "container", 1);
	int keep = spank_setenv(sp, "SURFACE_KEEP", "plugin", 0);
	slurm_spank_log("surface: task %u of job %u", rank, job);
	record(ac, av, "task_init job=%u rank=%u procid=%s unset=%d set=%d keep=%d euid=%d", job, rank, procid, unset, set,
	       keep, (int) geteuid());
	return 0;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	int status = -1;
	uint32_t job = 0, local = 0;
	if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local) != ESPANK_SUCCESS) {
		slurm_error("surface: an item of task_exit is missing");
		return -1;
	}
	record(ac, av, "task_exit job=%u status=%d local=%u", job, status, local);
	return 0;
}

static int job_script(spank_t sp, int ac, char **av, const char *hook)
{
	char fail[32];
	snprintf(fail, sizeof(fail), "fail=%s", hook);
	if (has_arg(ac, av, fail)) {
		slurm_error("surface: %s fails on purpose", hook);
		return -1;
	}
	uid_t uid = 0;
	gid_t gid = 0;
	uint32_t job = 0;
	int rc_uid = spank_get_item(sp, S_JOB_UID, &uid);
	int rc_gid = spank_get_item(sp, S_JOB_GID, &gid);
	int rc_job = spank_get_item(sp, S_JOB_ID, &job);
	if (rc_uid != ESPANK_SUCCESS || rc_gid != ESPANK_SUCCESS || rc_job != ESPANK_SUCCESS) {
		slurm_error("surface: %s: job items missing: %d %d %d", hook, rc_uid, rc_gid, rc_job);
		return -1;
	}
	char *value = NULL;
	int opt = spank_option_getopt(sp, &image_option, &value);
	char buf[16];
	int get = spank_getenv(sp, "PATH", buf, sizeof(buf));
	record(ac, av, "%s ctx=%d job=%u uid=%u gid=%u image=%s getopt=%d getenv=%d euid=%d", hook, (int) spank_context(), job,
	       (unsigned) uid, (unsigned) gid, opt == ESPANK_SUCCESS && value ? value : "-", opt, get, (int) geteuid());
	return 0;
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	return job_script(sp, ac, av, "job_prolog");
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	/* pyxis fixes up the epilog process's own environment so. */
	if (setenv("PATH", "/usr/local/bin:/usr/bin:/bin", 0) < 0 || unsetenv("HOME") < 0)
		return -1;
	return job_script(sp, ac, av, "job_epilog");
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	record(ac, av, "exit ctx=%d", (int) spank_context());
	return 0;
}

int slurm_spank_slurmd_exit(spank_t sp, int ac, char **av)
{
	record(ac, av, "slurmd_exit ctx=%d euid=%d", (int) spank_context(), (int) geteuid());
	return 0;
}
