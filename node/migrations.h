/* SPDX-License-Identifier: MIT */
/*
 * The schema migrations of db/NNNN_name.sql, embedded at build time
 * (cmake/embed_sql.cmake) in ascending version order. The store applies those
 * above the database's version, each in one transaction with its row in
 * semq_schema.
 */
#ifndef SEMQ_MIGRATIONS_H
#define SEMQ_MIGRATIONS_H

#include <stddef.h>

struct migration {
	int version;
	const char *name; /* file name, for messages */
	const char *sql;
};

extern const struct migration semq_migrations[];
extern const size_t semq_n_migrations;

#endif
