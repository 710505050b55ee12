/* The variadic exports of libfabric.so.1, which stable Rust cannot define:
 * each formats its arguments and hands the text to a Rust function. */
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>

void fabric_capi_log(const void *prov, int level, int subsys, const char *msg);
int fabric_capi_param_define(const void *prov, const char *name, int type, const char *help);

/* fi_log(prov, level, subsys, func, line, fmt, ...): libfabric's providers'
 * logging entry point; the message is prefixed with the function name. */
void fi_log(const void *prov, int level, int subsys, const char *func, int line, const char *fmt, ...)
{
	char msg[1024];
	int n = snprintf(msg, sizeof msg, "%s():%d ", func ? func : "?", line);
	va_list ap;
	if (n < 0 || (size_t) n >= sizeof msg)
		n = 0;
	msg[n] = '\0';
	va_start(ap, fmt);
	if (fmt)
		vsnprintf(msg + n, sizeof msg - n, fmt, ap);
	va_end(ap);
	fabric_capi_log(prov, level, subsys, msg);
}

/* fi_param_define(prov, name, type, help_fmt, ...). */
int fi_param_define(const void *prov, const char *name, int type, const char *help_fmt, ...)
{
	char help[1024] = "";
	va_list ap;
	va_start(ap, help_fmt);
	if (help_fmt)
		vsnprintf(help, sizeof help, help_fmt, ap);
	va_end(ap);
	return fabric_capi_param_define(prov, name, type, help);
}
