# SPDX-License-Identifier: MIT
# Turns the migration files into the C arrays of node/migrations.h that the
# store's migration runner applies in order: { version, name, sql }.
# FILES are SQLite's db/NNNN_name.sql (semq_migrations), PG_FILES
# PostgreSQL's db/postgresql/NNNN_name.sql (semq_pg_migrations); each list
# comes sorted. Invoked with -DOUT=... -DFILES=... -DPG_FILES=...

# embed(LIST PREFIX ARRAY COUNT): appends the file contents to `body` and
# the array of their entries (ending in a { 0 } sentinel, so that an empty
# list is still valid C) to `tables`.
function(embed files prefix array count_name)
  set(entries "")
  set(count 0)
  foreach(f IN LISTS files)
    get_filename_component(name ${f} NAME)
    string(REGEX MATCH "^([0-9]+)_" _ ${name})
    math(EXPR version "${CMAKE_MATCH_1}")
    file(READ ${f} sql HEX)
    string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," sql "${sql}")
    string(APPEND body "static const char ${prefix}_${version}[] = {${sql} 0};\n")
    list(APPEND entries "{${version}, \"${name}\", ${prefix}_${version}}")
    math(EXPR count "${count} + 1")
  endforeach()
  list(APPEND entries "{0, NULL, NULL}")
  list(JOIN entries ",\n  " table)
  string(APPEND tables "const struct migration ${array}[] = {\n  ${table}\n};\n"
                       "const size_t ${count_name} = ${count};\n")
  set(body "${body}" PARENT_SCOPE)
  set(tables "${tables}" PARENT_SCOPE)
endfunction()

set(body "")
set(tables "")
embed("${FILES}" sqlite_sql semq_migrations semq_n_migrations)
embed("${PG_FILES}" pg_sql semq_pg_migrations semq_pg_n_migrations)
file(WRITE ${OUT}.tmp "/* Generated from the SQL files of db/ and db/postgresql/ by cmake/embed_sql.cmake. */
#include <stddef.h>
#include \"migrations.h\"
${body}
${tables}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
