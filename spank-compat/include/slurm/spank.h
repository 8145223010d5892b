/*
 * Drover's own <slurm/spank.h>: the SPANK plugin ABI of Slurm 22.05 (type layouts, enum values,
 * function signatures), written for Drover from the ABI facts alone. Plugins built against
 * Slurm's header and plugins built against this one are interchangeable.
 */
#ifndef DROVER_SLURM_SPANK_H
#define DROVER_SLURM_SPANK_H

#include <stdint.h>
#include <sys/types.h>

#define SLURM_VERSION_NUM(major, minor, micro) (((major) << 16) + ((minor) << 8) + (micro))
#ifndef SLURM_VERSION_NUMBER
#define SLURM_VERSION_NUMBER 0x160508 /* 22.05.8 */
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handle passed to every callback. */
typedef struct spank_handle *spank_t;

/* Every callback: the handle, then the arguments of its plugstack.conf line. */
typedef int (spank_f)(spank_t spank, int ac, char *argv[]);

extern spank_f slurm_spank_init;
extern spank_f slurm_spank_job_prolog;
extern spank_f slurm_spank_init_post_opt;
extern spank_f slurm_spank_local_user_init;
extern spank_f slurm_spank_user_init;
extern spank_f slurm_spank_task_init_privileged;
extern spank_f slurm_spank_task_init;
extern spank_f slurm_spank_task_post_fork;
extern spank_f slurm_spank_task_exit;
extern spank_f slurm_spank_job_epilog;
extern spank_f slurm_spank_slurmd_exit;
extern spank_f slurm_spank_exit;

enum spank_item {
	S_JOB_UID = 0,
	S_JOB_GID,
	S_JOB_ID,
	S_JOB_STEPID,
	S_JOB_NNODES,
	S_JOB_NODEID,
	S_JOB_LOCAL_TASK_COUNT,
	S_JOB_TOTAL_TASK_COUNT,
	S_JOB_NCPUS,
	S_JOB_ARGV,
	S_JOB_ENV,
	S_TASK_ID,
	S_TASK_GLOBAL_ID,
	S_TASK_EXIT_STATUS,
	S_TASK_PID,
	S_JOB_PID_TO_GLOBAL_ID,
	S_JOB_PID_TO_LOCAL_ID,
	S_JOB_LOCAL_TO_GLOBAL_ID,
	S_JOB_GLOBAL_TO_LOCAL_ID,
	S_JOB_SUPPLEMENTARY_GIDS,
	S_SLURM_VERSION,
	S_SLURM_VERSION_MAJOR,
	S_SLURM_VERSION_MINOR,
	S_SLURM_VERSION_MICRO,
	S_STEP_CPUS_PER_TASK,
	S_JOB_ALLOC_CORES,
	S_JOB_ALLOC_MEM,
	S_STEP_ALLOC_CORES,
	S_STEP_ALLOC_MEM,
	S_SLURM_RESTART_COUNT,
	S_JOB_ARRAY_ID,
	S_JOB_ARRAY_TASK_ID
};
typedef enum spank_item spank_item_t;

enum spank_err {
	ESPANK_SUCCESS = 0,
	ESPANK_ERROR = 3000,
	ESPANK_BAD_ARG = 3001,
	ESPANK_NOT_TASK = 3002,
	ESPANK_ENV_EXISTS = 3003,
	ESPANK_ENV_NOEXIST = 3004,
	ESPANK_NOSPACE = 3005,
	ESPANK_NOT_REMOTE = 3006,
	ESPANK_NOEXIST = 3007,
	ESPANK_NOT_EXECD = 3008,
	ESPANK_NOT_AVAIL = 3009,
	ESPANK_NOT_LOCAL = 3010
};
typedef enum spank_err spank_err_t;

enum spank_context {
	S_CTX_ERROR = 0,
	S_CTX_LOCAL = 1,
	S_CTX_REMOTE = 2,
	S_CTX_ALLOCATOR = 3,
	S_CTX_SLURMD = 4,
	S_CTX_JOB_SCRIPT = 5
};
typedef enum spank_context spank_context_t;

#define HAVE_S_CTX_SLURMD 1
#define HAVE_S_CTX_JOB_SCRIPT 1

/* Declares the data symbols the host requires of every plugin. */
#define SPANK_PLUGIN(__name, __ver) \
	const char plugin_name[] = #__name; \
	const char plugin_type[] = "spank"; \
	const unsigned int plugin_version = SLURM_VERSION_NUMBER; \
	const unsigned int spank_plugin_version = __ver;

#define SPANK_OPTION_MAXLEN 75

/* Called when the option is seen: its val, its argument (NULL without one), 1 on the remote side. */
typedef int (*spank_opt_cb_f)(int val, const char *optarg, int remote);

struct spank_option {
	char *name;
	char *arginfo;
	char *usage;
	int has_arg;
	int val;
	spank_opt_cb_f cb;
};

#define SPANK_OPTIONS_TABLE_END { NULL, NULL, NULL, 0, 0, NULL }

/* Optional table of options, ended by SPANK_OPTIONS_TABLE_END. */
extern struct spank_option spank_options[];

const char *spank_strerror(spank_err_t err);
int spank_symbol_supported(const char *symbol);
int spank_remote(spank_t spank);
spank_context_t spank_context(void);
spank_err_t spank_option_register(spank_t spank, struct spank_option *opt);
spank_err_t spank_option_getopt(spank_t spank, struct spank_option *opt, char **optarg);
spank_err_t spank_get_item(spank_t spank, spank_item_t item, ...);
spank_err_t spank_getenv(spank_t spank, const char *var, char *buf, int len);
spank_err_t spank_setenv(spank_t spank, const char *var, const char *val, int overwrite);
spank_err_t spank_unsetenv(spank_t spank, const char *var);
spank_err_t spank_job_control_setenv(spank_t sp, const char *name, const char *value, int overwrite);
spank_err_t spank_job_control_getenv(spank_t sp, const char *name, char *buf, int len);
spank_err_t spank_job_control_unsetenv(spank_t sp, const char *name);

void slurm_info(const char *format, ...) __attribute__((format(printf, 1, 2)));
void slurm_error(const char *format, ...) __attribute__((format(printf, 1, 2)));
void slurm_verbose(const char *format, ...) __attribute__((format(printf, 1, 2)));
void slurm_debug(const char *format, ...) __attribute__((format(printf, 1, 2)));
void slurm_debug2(const char *format, ...) __attribute__((format(printf, 1, 2)));
void slurm_debug3(const char *format, ...) __attribute__((format(printf, 1, 2)));
void slurm_spank_log(const char *format, ...) __attribute__((format(printf, 1, 2)));

#ifdef __cplusplus
}
#endif

#endif
