/*
 * Tasks that start together (tests/tests/spank.rs): in the remote context each task's task_init
 * creates `<dir>/<job>.<step>.<local id>` (the plugin's `dir=<path>` argument) and then waits, up
 * to 10 seconds, until the files of all the node's tasks exist; if they do not, it fails the task.
 * As under pyxis, whose first task_init starts the container the node's other tasks join, this
 * passes only when all of a node's tasks are forked before any runs task_init (as in Slurm):
 * with tasks forked one after another, the first waits for a task that is not forked yet.
 * Only steps with more than one task on the node are checked.
 */
#include <slurm/spank.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

SPANK_PLUGIN(together, 1);

static const char *dir_arg(int ac, char **av)
{
	for (int i = 0; i < ac; i++)
		if (strncmp(av[i], "dir=", 4) == 0)
			return av[i] + 4;
	return NULL;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	const char *dir = dir_arg(ac, av);
	uint32_t job = 0, step = 0, count = 0;
	int id = -1;
	if (dir == NULL || !spank_remote(sp))
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_TASK_ID, &id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &count) != ESPANK_SUCCESS) {
		slurm_error("together: the task's items are not available");
		return -1;
	}
	if (count < 2)
		return 0;
	char path[4096];
	snprintf(path, sizeof(path), "%s/%u.%u.%d", dir, job, step, id);
	int fd = open(path, O_WRONLY | O_CREAT, 0644);
	if (fd < 0) {
		slurm_error("together: cannot create %s", path);
		return -1;
	}
	close(fd);
	uint32_t seen = 0;
	for (int tries = 0; tries < 100; tries++) {
		seen = 0;
		for (uint32_t other = 0; other < count; other++) {
			snprintf(path, sizeof(path), "%s/%u.%u.%u", dir, job, step, other);
			if (access(path, F_OK) == 0)
				seen++;
		}
		if (seen == count)
			return 0;
		struct timespec pause = { 0, 100 * 1000 * 1000 };
		nanosleep(&pause, NULL);
	}
	slurm_error("together: task %d saw %u of the node's %u tasks in task_init", id, seen, count);
	return -1;
}
