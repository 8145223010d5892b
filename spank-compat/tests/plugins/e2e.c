/*
 * The end-to-end plugin (tests/tests/spank.rs): registers --e2e-word and --e2e-fail-task, and on
 * the remote side puts what it saw into the task's environment: the option's value
 * (init_post_opt), the effective uid in task_init_privileged and in task_init, and the pid
 * task_init ran in (the task's own, if it runs inside the task before exec). task_init logs an
 * informational line (which must stay out of the job's output) and, under --e2e-fail-task,
 * fails with an error line. In srun (local context) local_user_init prints the job and step.
 * E2E_CRASH in the job's environment makes init segfault; E2E_FAIL makes it return an error.
 */
#include <slurm/spank.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

SPANK_PLUGIN(e2e, 1);

static char word[64] = "none";

static int word_cb(int val, const char *optarg, int remote)
{
	(void) val;
	(void) remote;
	if (optarg == NULL || strcmp(optarg, "bad") == 0)
		return -1;
	snprintf(word, sizeof(word), "%s", optarg);
	return 0;
}

static struct spank_option word_option = { "e2e-word", "word", "A word the e2e plugin puts in the job's environment", 1, 0, word_cb };

static int fail_task = 0;

static int fail_cb(int val, const char *optarg, int remote)
{
	(void) val;
	(void) optarg;
	(void) remote;
	fail_task = 1;
	return 0;
}

static struct spank_option fail_option = { "e2e-fail-task", NULL, "Make the e2e plugin's task_init fail", 0, 0, fail_cb };

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (spank_option_register(sp, &word_option) != ESPANK_SUCCESS)
		return -1;
	if (spank_option_register(sp, &fail_option) != ESPANK_SUCCESS)
		return -1;
	if (spank_remote(sp)) {
		char buf[8];
		if (spank_getenv(sp, "E2E_CRASH", buf, sizeof(buf)) == ESPANK_SUCCESS) {
			volatile int *nowhere = NULL;
			*nowhere = 1;
		}
		if (spank_getenv(sp, "E2E_FAIL", buf, sizeof(buf)) == ESPANK_SUCCESS) {
			slurm_error("e2e: failing on purpose");
			return -1;
		}
	}
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (!spank_remote(sp))
		return 0;
	char text[96];
	snprintf(text, sizeof(text), "word=%s", word);
	return spank_setenv(sp, "E2E_FROM_PLUGIN", text, 1);
}

static int note_euid(spank_t sp, const char *name)
{
	char text[32];
	snprintf(text, sizeof(text), "%d", (int) geteuid());
	return spank_setenv(sp, name, text, 1);
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	return note_euid(sp, "E2E_PRIV_EUID");
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	char pid[32];
	snprintf(pid, sizeof(pid), "%d", (int) getpid());
	slurm_info("e2e: informational line from task_init");
	if (fail_task) {
		slurm_error("e2e: task_init refuses this task");
		return -1;
	}
	if (spank_setenv(sp, "E2E_TASK_PID", pid, 1) != ESPANK_SUCCESS)
		return -1;
	return note_euid(sp, "E2E_TASK_EUID");
}

int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	uint32_t job = 0, step = 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
		return -1;
	slurm_info("e2e: local_user_init in srun for step %u.%u word=%s", job, step, word);
	return 0;
}
