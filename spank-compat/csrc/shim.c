/*
 * The C half of Drover's SPANK host: the variadic entry points that stable Rust cannot define
 * (spank_get_item and the printf-style loggers), and the crash guard around plugin callbacks.
 *
 * spank_get_item pulls exactly the arguments its item takes off the va_list and hands them to
 * one typed Rust function, drover_spank_item(handle, item, value_in, first, second). The loggers
 * format into a heap buffer and call drover_spank_log(level, message).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Implemented in Rust (src/abi.rs). */
extern int drover_spank_item(void *spank, int item, int64_t value_in, void *first, void *second);
extern void drover_spank_log(int level, const char *message);

/* Items whose first vararg is a value (a pid_t or a uint32_t), not a pointer. */
static int item_takes_value(int item)
{
	return item >= 15 && item <= 18;
}

/* Items that take two pointers. */
static int item_takes_two_pointers(int item)
{
	return item == 9 || item == 19;
}

int spank_get_item(void *spank, int item, ...)
{
	va_list ap;
	int64_t value_in = 0;
	void *first = NULL;
	void *second = NULL;

	if (item < 0 || item > 31)
		return 3001; /* ESPANK_BAD_ARG; nothing known to pull off the list */
	va_start(ap, item);
	if (item_takes_value(item)) {
		if (item <= 16)
			value_in = (int64_t) va_arg(ap, pid_t);
		else
			value_in = (int64_t) va_arg(ap, uint32_t);
		first = va_arg(ap, void *);
	} else {
		first = va_arg(ap, void *);
		if (item_takes_two_pointers(item))
			second = va_arg(ap, void *);
	}
	va_end(ap);
	return drover_spank_item(spank, item, value_in, first, second);
}

static void log_va(int level, const char *format, va_list ap)
{
	char small[512];
	va_list copy;
	int needed;

	if (format == NULL)
		return;
	va_copy(copy, ap);
	needed = vsnprintf(small, sizeof(small), format, copy);
	va_end(copy);
	if (needed < 0)
		return;
	if ((size_t) needed < sizeof(small)) {
		drover_spank_log(level, small);
		return;
	}
	char *big = malloc((size_t) needed + 1);
	if (big == NULL) {
		drover_spank_log(level, small);
		return;
	}
	vsnprintf(big, (size_t) needed + 1, format, ap);
	drover_spank_log(level, big);
	free(big);
}

/* Levels match drover_spank_compat::LogLevel. */
#define DEFINE_LOGGER(fn_name, level) \
	void fn_name(const char *format, ...) \
	{ \
		va_list ap; \
		va_start(ap, format); \
		log_va(level, format, ap); \
		va_end(ap); \
	}

DEFINE_LOGGER(slurm_spank_log, 0)
DEFINE_LOGGER(slurm_error, 1)
DEFINE_LOGGER(slurm_info, 2)
DEFINE_LOGGER(slurm_verbose, 3)
DEFINE_LOGGER(slurm_debug, 4)
DEFINE_LOGGER(slurm_debug2, 5)
DEFINE_LOGGER(slurm_debug3, 6)

/* ---- crash guard ---- */

static const int guarded_signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS };
#define N_GUARDED (sizeof(guarded_signals) / sizeof(guarded_signals[0]))

static __thread sigjmp_buf *guard_target;

static void guard_handler(int sig)
{
	sigjmp_buf *target = guard_target;

	if (target != NULL) {
		guard_target = NULL;
		siglongjmp(*target, sig);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

/* An alternate signal stack for this thread, so a stack overflow in a plugin is caught too. */
static void ensure_alt_stack(void)
{
	stack_t current;

	if (sigaltstack(NULL, &current) == 0 && !(current.ss_flags & SS_DISABLE))
		return;
	stack_t fresh;
	fresh.ss_size = 64 * 1024;
	fresh.ss_sp = malloc(fresh.ss_size);
	fresh.ss_flags = 0;
	if (fresh.ss_sp != NULL && sigaltstack(&fresh, NULL) != 0)
		free(fresh.ss_sp);
}

typedef int (*drover_spank_callback)(void *spank, int ac, char **av);

/*
 * Calls `callback`; if it dies of a fault signal, returns -1 with *crash_signal set to the
 * signal instead of letting the process die. Handlers in place before are restored either way.
 */
int drover_spank_call_guarded(drover_spank_callback callback, void *spank, int ac, char **av,
			      int *crash_signal)
{
	struct sigaction guard, previous[N_GUARDED];
	sigjmp_buf target;
	volatile int rc = -1;
	int sig;
	size_t i;

	*crash_signal = 0;
	ensure_alt_stack();
	memset(&guard, 0, sizeof(guard));
	guard.sa_handler = guard_handler;
	sigemptyset(&guard.sa_mask);
	guard.sa_flags = SA_ONSTACK | SA_NODEFER;
	for (i = 0; i < N_GUARDED; i++)
		sigaction(guarded_signals[i], &guard, &previous[i]);

	sig = sigsetjmp(target, 1);
	if (sig == 0) {
		guard_target = &target;
		rc = callback(spank, ac, av);
	} else {
		*crash_signal = sig;
		rc = -1;
	}
	guard_target = NULL;
	for (i = 0; i < N_GUARDED; i++)
		sigaction(guarded_signals[i], &previous[i], NULL);
	return rc;
}

/* Calls a plugin's `int init(void)` under the same guard. */
static int call_init(void *spank, int ac, char **av)
{
	(void) ac;
	(void) av;
	return ((int (*)(void)) spank)();
}

int drover_spank_call_init_guarded(int (*init)(void), int *crash_signal)
{
	return drover_spank_call_guarded(call_init, (void *) init, 0, NULL, crash_signal);
}

/* Calls an option callback under the same guard. */
struct option_call {
	int (*cb)(int, const char *, int);
	int val;
	const char *optarg;
	int remote;
};

static int call_option(void *call, int ac, char **av)
{
	struct option_call *c = call;
	(void) ac;
	(void) av;
	return c->cb(c->val, c->optarg, c->remote);
}

int drover_spank_call_option_guarded(int (*cb)(int, const char *, int), int val, const char *optarg,
				     int remote, int *crash_signal)
{
	struct option_call call = { cb, val, optarg, remote };
	return drover_spank_call_guarded(call_option, &call, 0, NULL, crash_signal);
}
