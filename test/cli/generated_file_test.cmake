# SPDX-License-Identifier: Apache-2.0
# A file checked in that a command generates from the code must be that command's output:
#   cmake -DCOMMAND="prog;arg;..." -DFILE=<checked-in file> -P generated_file_test.cmake
# Fails naming the first line that differs and how to regenerate the file.
execute_process(COMMAND ${COMMAND} OUTPUT_VARIABLE generated RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${COMMAND} failed (${rc}): ${err}")
endif()
file(READ "${FILE}" checked_in)
if(NOT generated STREQUAL checked_in)
  # Lines as list elements (a line's own ";" kept out of the way first).
  string(REPLACE ";" "<semicolon>" generated "${generated}")
  string(REPLACE ";" "<semicolon>" checked_in "${checked_in}")
  string(REPLACE "\n" ";" want "${generated}")
  string(REPLACE "\n" ";" have "${checked_in}")
  list(LENGTH want n_want)
  list(LENGTH have n_have)
  set(line 0)
  while(line LESS n_want AND line LESS n_have)
    list(GET want ${line} w)
    list(GET have ${line} h)
    if(NOT "${h}" STREQUAL "${w}")
      break()
    endif()
    math(EXPR line "${line} + 1")
  endwhile()
  math(EXPR shown "${line} + 1")
  string(REPLACE ";" " " cmd "${COMMAND}")
  message(FATAL_ERROR "${FILE} is not what `${cmd}` prints (${n_have} against ${n_want} lines; first "
                      "difference at line ${shown}). Regenerate it: ${cmd} > ${FILE}")
endif()
