/*
 * The end-to-end plugin (tests/tests/spank.rs): registers --e2e-word, and on the remote side
 * puts what it saw into the job's environment: the option's value (init_post_opt), the
 * effective uid in task_init_privileged and in task_init. E2E_CRASH in the job's environment
 * makes init segfault; E2E_FAIL makes it return an error.
 */
#include <slurm/spank.h>
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

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (spank_option_register(sp, &word_option) != ESPANK_SUCCESS)
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
	return note_euid(sp, "E2E_TASK_EUID");
}
