/* SPDX-License-Identifier: MIT */
/*
 * The schema migrations, embedded at build time (cmake/embed_sql.cmake) in
 * ascending version order: db/NNNN_name.sql for SQLite and
 * db/postgresql/NNNN_name.sql for PostgreSQL, with the same version numbers.
 * The store's one migration runner applies the list of its database's kind
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

/* SQLite: db/NNNN_name.sql. */
extern const struct migration semq_migrations[];
extern const size_t semq_n_migrations;

/* PostgreSQL: db/postgresql/NNNN_name.sql. */
extern const struct migration semq_pg_migrations[];
extern const size_t semq_pg_n_migrations;

#endif
