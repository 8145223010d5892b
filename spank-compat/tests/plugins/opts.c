/*
 * Options, environment and logging: a table option (--opt-flag), one registered in init
 * (--opt-value=<word>, refusing "bad"), the callbacks' (val, optarg, remote) and what getopt
 * says afterwards; spank_setenv/getenv/unsetenv and the job-control env with their error codes.
 */
#include <slurm/spank.h>
#include <stdlib.h>
#include <string.h>
#include "record.h"

SPANK_PLUGIN(opt-plugin, 1);

static int saw_value_remote = -1;
static char value[64];

static int flag_cb(int val, const char *optarg, int remote)
{
	(void) optarg;
	FILE *f = fopen(getenv("OPTS_OUT"), "a");
	if (f) { fprintf(f, "cb flag val=%d remote=%d\n", val, remote); fclose(f); }
	return 0;
}

static int value_cb(int val, const char *optarg, int remote)
{
	if (optarg == NULL || strcmp(optarg, "bad") == 0)
		return -1;
	snprintf(value, sizeof(value), "%s", optarg);
	saw_value_remote = remote;
	FILE *f = fopen(getenv("OPTS_OUT"), "a");
	if (f) { fprintf(f, "cb value val=%d arg=%s remote=%d\n", val, optarg, remote); fclose(f); }
	return 0;
}

struct spank_option spank_options[] = {
	{ "opt-flag", NULL, "Turn the test flag on", 0, 7, flag_cb },
	SPANK_OPTIONS_TABLE_END
};

static struct spank_option value_option = { "opt-value", "word", "A word for the test plugin", 1, 9, value_cb };

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_err_t rc = spank_option_register(sp, &value_option);
	record(ac, av, "init register=%d", rc);
	char *arg = NULL;
	record(ac, av, "init getopt=%d", spank_option_getopt(sp, &value_option, &arg));
	struct spank_option nameless = { NULL, NULL, "x", 0, 0, NULL };
	record(ac, av, "init register-nameless=%d", spank_option_register(sp, &nameless));
	struct spank_option longname = { "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL, "x", 0, 0, NULL };
	record(ac, av, "init register-long=%d", spank_option_register(sp, &longname));
	slurm_info("opts: info %d", 1);
	slurm_error("opts: error %s", "two");
	slurm_verbose("opts: verbose");
	slurm_debug("opts: debug");
	slurm_debug2("opts: debug2");
	slurm_debug3("opts: debug3");
	slurm_spank_log("opts: spank_log %05d", 42);
	record(ac, av, "init strerror=%s", spank_strerror(ESPANK_NOSPACE));
	record(ac, av, "init supported=%d,%d,%d", spank_symbol_supported("slurm_spank_task_init"),
	       spank_symbol_supported("slurm_spank_bogus"), spank_symbol_supported(NULL));
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	record(ac, av, "init_post_opt register=%d", spank_option_register(sp, &value_option));
	record(ac, av, "init_post_opt value=%s remote=%d", value, saw_value_remote);
	if (spank_context() == S_CTX_ALLOCATOR || spank_context() == S_CTX_LOCAL) {
		record(ac, av, "jc set=%d", spank_job_control_setenv(sp, "OPT_JC", "jc-value", 1));
		record(ac, av, "jc set-again=%d", spank_job_control_setenv(sp, "OPT_JC", "other", 0));
		char small[4], buf[64];
		record(ac, av, "jc get-small=%d", spank_job_control_getenv(sp, "OPT_JC", small, sizeof(small)));
		spank_err_t rc = spank_job_control_getenv(sp, "OPT_JC", buf, sizeof(buf));
		record(ac, av, "jc get=%d %s", rc, rc ? "" : buf);
		record(ac, av, "jc get-missing=%d", spank_job_control_getenv(sp, "NOPE", buf, sizeof(buf)));
		record(ac, av, "env get=%d", spank_getenv(sp, "HOME", buf, sizeof(buf)));
	}
	if (spank_context() == S_CTX_REMOTE) {
		char buf[64], small[3];
		record(ac, av, "jc remote=%d", spank_job_control_setenv(sp, "X", "y", 1));
		record(ac, av, "env set=%d", spank_setenv(sp, "OPT_SET", "from-plugin", 0));
		record(ac, av, "env set-again=%d", spank_setenv(sp, "OPT_SET", "other", 0));
		spank_err_t rc = spank_getenv(sp, "OPT_SET", buf, sizeof(buf));
		record(ac, av, "env get=%d %s", rc, rc ? "" : buf);
		record(ac, av, "env get-small=%d", spank_getenv(sp, "OPT_SET", small, sizeof(small)));
		record(ac, av, "env get-missing=%d", spank_getenv(sp, "NOPE", buf, sizeof(buf)));
		record(ac, av, "env unset=%d", spank_unsetenv(sp, "OPT_GONE"));
		rc = spank_getenv(sp, "_SLURM_SPANK_OPTION_opt_plugin_opt_value", buf, sizeof(buf));
		record(ac, av, "env option-var=%d", rc);
	}
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	char *arg = NULL;
	spank_err_t rc = spank_option_getopt(sp, &value_option, &arg);
	record(ac, av, "task_init getopt=%d %s", rc, rc ? "" : arg);
	record(ac, av, "task_init getopt-flag=%d", spank_option_getopt(sp, &spank_options[0], NULL));
	record(ac, av, "task_init getopt-null=%d", spank_option_getopt(sp, &value_option, NULL));
	return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	char *arg = NULL;
	record(ac, av, "exit getopt=%d", spank_option_getopt(sp, &value_option, &arg));
	return 0;
}
