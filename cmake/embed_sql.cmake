# SPDX-License-Identifier: MIT
# Turns db/NNNN_name.sql files into a C array the store's migration runner
# applies in order: { version, name, sql }. Invoked with -DOUT=... -DFILES=...
set(body "")
set(count 0)
foreach(f IN LISTS FILES)
  get_filename_component(name ${f} NAME)
  string(REGEX MATCH "^([0-9]+)_" _ ${name})
  math(EXPR version "${CMAKE_MATCH_1}")
  file(READ ${f} sql HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," sql "${sql}")
  string(APPEND body "static const char sql_${version}[] = {${sql} 0};\n")
  list(APPEND entries "{${version}, \"${name}\", sql_${version}}")
  math(EXPR count "${count} + 1")
endforeach()
list(JOIN entries ",\n  " table)
file(WRITE ${OUT}.tmp "/* Generated from the db/ SQL files by cmake/embed_sql.cmake. */
#include <stddef.h>
#include \"migrations.h\"
${body}
const struct migration semq_migrations[] = {
  ${table}
};
const size_t semq_n_migrations = ${count};
")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
