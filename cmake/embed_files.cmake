# SPDX-License-Identifier: MIT
# Turns the web/ files of the admin dashboard into a C table node/webui.c
# looks up: { path, content_type, bytes, len }, sorted by path. Invoked with
# -DOUT=gen/webui_files.c -DFILES=a;b;... (absolute paths). The content type
# comes from the extension; a file of another type stops the build, so
# nothing is ever served with a guessed type. Names are plain file names
# ([A-Za-z0-9._-]): they become C string literals and URL paths as they are.
set(body "")
set(table "")
set(count 0)
set(sorted ${FILES})
list(SORT sorted)
foreach(f IN LISTS sorted)
  get_filename_component(name ${f} NAME)
  if(NOT name MATCHES "^[A-Za-z0-9._-]+$")
    message(FATAL_ERROR "embed_files: '${f}': a web file name may only hold A-Z a-z 0-9 . _ -")
  endif()
  string(TOLOWER "${name}" lname)
  if(lname MATCHES "\\.html$")
    set(ctype "text/html; charset=utf-8")
  elseif(lname MATCHES "\\.js$")
    set(ctype "text/javascript; charset=utf-8")
  elseif(lname MATCHES "\\.css$")
    set(ctype "text/css; charset=utf-8")
  elseif(lname MATCHES "\\.svg$")
    set(ctype "image/svg+xml")
  elseif(lname MATCHES "\\.png$")
    set(ctype "image/png")
  elseif(lname MATCHES "\\.ico$")
    set(ctype "image/x-icon")
  else()
    message(FATAL_ERROR "embed_files: '${f}': no content type for this extension (add one to cmake/embed_files.cmake)")
  endif()
  file(SIZE ${f} len)
  file(READ ${f} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  # A trailing NUL keeps an empty file a valid array; len leaves it out.
  string(APPEND body "static const unsigned char file_${count}[] = {${hex} 0};\n")
  # Appended as text, not as a list: the content types hold ';'.
  if(count GREATER 0)
    string(APPEND table ",\n")
  endif()
  string(APPEND table "  {\"${name}\", \"${ctype}\", file_${count}, ${len}}")
  math(EXPR count "${count} + 1")
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "embed_files: no files given (FILES is empty)")
endif()
file(WRITE ${OUT}.tmp "/* Generated from web/ by cmake/embed_files.cmake: do not edit. */
#include <stddef.h>
#include \"webui.h\"
${body}
const struct webui_file webui_files[] = {
${table}
};
const size_t webui_n_files = ${count};
")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
