/* SPDX-License-Identifier: MIT */
/*
 * A test plugin for test_plughost: complete, but built for another ABI
 * (999). The host must refuse it before calling init; init would leave a
 * table named badabi_was_initialised behind, which the test looks for.
 */
#include <semq/plugin.h>

#include <sqlite3.h>

int semq_plugin_abi_version(void);
int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz);
int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err,
		       size_t errsz);

int semq_plugin_abi_version(void)
{
	return 999;
}

int semq_plugin_init(const struct semq_plugin_init_args *a, void **handle_out,
		     char *err, size_t errsz)
{
	if (a->tx && a->tx->db)
		sqlite3_exec(a->tx->db,
			     "CREATE TABLE badabi_was_initialised(x)", NULL,
			     NULL, NULL);
	*handle_out = NULL;
	return SEMQ_PLUGIN_OK;
}

int semq_plugin_handle(void *handle, const struct semq_plugin_msg *m,
		       const struct semq_plugin_tx *tx, char *err, size_t errsz)
{
	return SEMQ_PLUGIN_OK;
}
