/* SPDX-License-Identifier: MIT */
/*
 * A test plugin for test_plughost: right ABI version and an init, but no
 * semq_plugin_handle. The host must refuse it and name the missing symbol.
 */
#include <semq/plugin.h>

int semq_plugin_abi_version(void);
int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz);

int semq_plugin_abi_version(void)
{
	return SEMQ_PLUGIN_ABI_VERSION;
}

int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz)
{
	*handle_out = NULL;
	return SEMQ_PLUGIN_OK;
}
