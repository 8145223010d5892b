/* Test-plugin helper: appends one line to the file named by the plugin's `out=<path>` argument. */
#ifndef RECORD_H
#define RECORD_H
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((unused)) static const char *record_path(int ac, char **av)
{
	for (int i = 0; i < ac; i++)
		if (strncmp(av[i], "out=", 4) == 0)
			return av[i] + 4;
	return NULL;
}

__attribute__((unused)) static int has_arg(int ac, char **av, const char *word)
{
	for (int i = 0; i < ac; i++)
		if (strcmp(av[i], word) == 0)
			return 1;
	return 0;
}

__attribute__((format(printf, 3, 4), unused))
static void record(int ac, char **av, const char *format, ...)
{
	const char *path = record_path(ac, av);
	if (path == NULL)
		return;
	FILE *file = fopen(path, "a");
	if (file == NULL)
		return;
	va_list ap;
	va_start(ap, format);
	vfprintf(file, format, ap);
	va_end(ap);
	fputc('\n', file);
	fclose(file);
}
#endif
